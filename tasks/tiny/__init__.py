"""Builders of tiny random models in the layouts the real ids load from (`images`: Stable Diffusion v1 and open_clip;
`text`: a masked and a causal LM on a caption-trained BPE), and their shared constants (image size, noise schedule,
the real CLIP BPE tokenizer). The demo profile (`tasks.demo`) and the toy world (`tasks.toyworld`) both build on them.

May import: `tasks.core`, `tasks.tiny`. Never `tasks.demo` or `tasks.toyworld` (both import this package).
"""
