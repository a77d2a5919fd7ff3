"""The object-removal strategy (Kim et al., "Exposing and Mitigating Spurious Correlations for Cross-Modal
Retrieval"): a real image with object boxes (`coco`), which co-occurring class to remove (`masks`), the caption with
the noun phrases naming it deleted (`captions`), the image with its mask filled (`inpaint`), and the CLIP check and
split (`selection`). A pair is (I_0, C_0) = the real image and caption, (I_1, C_1) = the edited ones.

May import: `tasks.core`, `tasks.text.ingest` and `tasks.text.tagging` (caption reading and tagging),
`tasks.image.scoring` (the CLIP scorer), `tasks.removal`. Never the noun-swap stages.
"""
