"""The command line on top of everything: `app` (typer's options), `commands` (each command's work) and `suites`
(`run`/`eval --problems`)."""
