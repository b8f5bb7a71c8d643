"""Boards and reports built from the store: boards as data (`board`, `entries`, `summaries`, `leaderboard`,
`suite_board` across problems), every column once (`columns`), the renderers (`render` for the terminal, JSON, CSV
and markdown, `report` as HTML from `templates/`), `browse` (`harness show`, `compare`), a run's outcome
(`run_summary`), baseline drift (`drift`) and the stored baselines (`baseline_cache`)."""
