"""The demo profile's tiny random models, built offline from a caption file's vocabulary (the text and image ones
from `tasks.tiny`, or assembled from the toy world's weights); also the tests' and benchmarks' fixtures. Nothing in
the pipeline's stage logic imports this package (the whole `Params` holds its params section).

May import: `tasks.core`, `tasks.text.ingest` (to read the captions), `tasks.tiny`, `tasks.toyworld.assemble`
(the toy world's weights in the pipeline's layouts), `tasks.demo`.
"""
