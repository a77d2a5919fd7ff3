"""The demo profile's tiny random models (text and image), built offline from a caption file's vocabulary; also the
tests' and benchmarks' fixtures. Nothing in the pipeline's stage logic imports this package
(the whole `Params` holds its params section).

May import: `tasks.core`, `tasks.text.ingest` (to read the captions), `tasks.demo`.
"""
