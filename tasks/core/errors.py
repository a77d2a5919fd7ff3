"""`UserError`: a mistake in the user's input, params, models or environment, reported by the CLI as one line."""


class UserError(ValueError):
    """Its message is one line that says what is wrong and, where it can, what to do."""
