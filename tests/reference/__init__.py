"""Minimal reference models for the checkpoint formats gptviz reads, each written for these tests from its project's
published design and parameter names (no code copied from those projects): what a file in that format holds, and
the forward pass the loaded model must reproduce."""
