from harness.cli import app

app(prog_name="harness")
