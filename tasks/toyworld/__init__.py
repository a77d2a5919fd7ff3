"""The toy world: scenes with ground truth, the miniature models trained on them, and the checker of every pair.

May import: `tasks.core`, `tasks.tiny` (the tiny models' layouts and constants), the image stage's `params`,
`sampling`, `backends` (its models are SD v1's), `render` and `thresholds` (truth renders and ranks as the image
stage), `tasks.toyworld`. Never `tasks.demo` (it assembles the toy world's weights).
"""
