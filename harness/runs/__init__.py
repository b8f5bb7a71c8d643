"""`harness run`: `pipeline` (generate, judge, refine), its `context`, `settings`, `folder` on disk, `verdicts`
(judging a turn's candidates) and `refinement` (the next turn's prompts)."""
