"""The model: its config (config), the GPT family (model), hook points and capture (hooks), generation
(generate), the tokenizer, parameter counts (params), and checkpoints: the format (checkpoint), the
Hugging Face Hub (hub) and where a model comes from (weights)."""
