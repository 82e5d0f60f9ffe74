"""Training and what it leaves: the loop (train), corpora (corpus), logs (training_log), snapshots of heads
forming (snapshots, formation), the warmup scenarios (warmup), and the model check and card (evaluate,
model_card, training_record)."""
