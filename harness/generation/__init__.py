"""Asking a model for candidates: prompts (`prompts`), the OpenAI-compatible and replay providers (`providers`), a
reply's code (`parsing`), a cut-off reply salvaged (`salvage`), a turn's replies stored, asked and salvaged
(`replies`), what the requests cost (`spend`), where samples go (`sample_paths`)."""
