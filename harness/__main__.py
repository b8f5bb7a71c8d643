from harness.cli.app import app

app(prog_name="harness")
