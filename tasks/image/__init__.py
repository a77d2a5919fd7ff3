"""Paired image generation for a (C_o, C_c) pair: Prompt-to-Prompt sampling (`sampling`, `p2p`) on an image backend
(`backends`: SD v1), CLIP scores (`scoring`), rendering and measuring (`render`), the pixel-addressed PNG store
(`store`), and the two stages that use them: `generate` (screen n_samples per pair) and `selection` (one canonical
winner per pair).

May import: `tasks.core`, `tasks.image`. Never `tasks.text` (it reads caption pairs as data, from the schema).
"""
