"""The toy world: scenes with ground truth, the miniature models trained on them, and the checker of every pair."""
