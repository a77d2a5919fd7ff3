"""Caption editing, the text half of a counterfactual: C_o -> noun sites -> masked-LM fills -> similarity window ->
the lowest-perplexity C_c. Each stage module has `run(frame, params, models)` and `load_models(params)`.

May import: `tasks.core`, `tasks.text`. Never `tasks.image` (a caption edit knows nothing of how it is rendered).
"""
