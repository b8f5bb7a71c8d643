"""What a later turn is told about the previous one: `compose` picks the part for a verdict's kind, one module per
kind (`compile_error`, `runtime_error`, `incorrect`, `correct`, `unusable_reply`), `flags` and `errors` shared by
them, `public` what may be shown of the judge."""
