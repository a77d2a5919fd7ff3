"""Human validation of the selected pairs (paper §4.1, Table 1, App. B.3): Label Studio tasks out and ratings back
in (`labelstudio`), then Table 1, Fleiss' κ, coverage and the human-validated subset (`agreement`).

May import: `tasks.core`, `tasks.validation`. It reads the selection as data and never loads a model.
"""
