"""RunConfig precedence: defaults < harness.toml < environment < CLI."""

from pathlib import Path

import pytest

from evaluator.parent.sandbox import EvalOptions, Evaluator

from harness.core.config import ConfigError, RunConfig, endpoint_configured, resolve_config


def test_defaults(tmp_path):
    cfg = resolve_config({}, environ={}, cwd=tmp_path)
    assert cfg == RunConfig()
    assert cfg.store == Path(".harness/results.sqlite") and cfg.variant == "kernelbench" and cfg.model is None


def test_precedence(tmp_path):
    (tmp_path / "harness.toml").write_text(
        'model = "from-file"\nbase_url = "http://file/v1"\nsamples = 8\ntemperature = 0.2\n'
        'store = "db/results.sqlite"\n[extra_body]\nreasoning_effort = "high"\n')
    env = {"OPENAI_BASE_URL": "http://env/v1", "HARNESS_MODEL": "from-env"}
    cfg = resolve_config({"model": "from-cli", "samples": None}, environ=env, cwd=tmp_path)
    assert cfg.model == "from-cli"                   # CLI beats env and file
    assert cfg.base_url == "http://env/v1"           # env beats file
    assert cfg.samples == 8 and cfg.temperature == 0.2  # file beats defaults; None on the CLI = not given
    assert cfg.extra_body == {"reasoning_effort": "high"}
    assert cfg.store == tmp_path / "db" / "results.sqlite"  # relative to the file
    assert resolve_config({}, environ={}, cwd=tmp_path).model == "from-file"


def test_store_from_env(tmp_path):
    cfg = resolve_config({}, environ={"HARNESS_STORE": str(tmp_path / "x.sqlite")}, cwd=tmp_path)
    assert cfg.store == tmp_path / "x.sqlite"
    assert resolve_config({"store": "cli.sqlite"}, environ={"HARNESS_STORE": "env.sqlite"}, cwd=tmp_path).store == Path("cli.sqlite")


def test_run_table_and_explicit_file(tmp_path):
    path = tmp_path / "other.toml"
    path.write_text('[run]\nvariant = "fusion"\nconcurrency = 2\n')
    cfg = resolve_config({}, environ={}, config_file=path, cwd=tmp_path)
    assert cfg.variant == "fusion" and cfg.concurrency == 2
    assert resolve_config({}, environ={"HARNESS_CONFIG": str(path)}, cwd=tmp_path).variant == "fusion"


def test_bad_settings_are_one_clear_error(tmp_path):
    (tmp_path / "harness.toml").write_text('modle = "typo"\n')
    with pytest.raises(ConfigError, match="unknown setting.*modle"):
        resolve_config({}, environ={}, cwd=tmp_path)
    (tmp_path / "harness.toml").write_text('samples = "many"\n')
    with pytest.raises(ConfigError, match="samples"):
        resolve_config({}, environ={}, cwd=tmp_path)
    (tmp_path / "harness.toml").write_text('samples = \n')
    with pytest.raises(ConfigError, match="harness.toml"):
        resolve_config({}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_config({}, environ={}, config_file=tmp_path / "none.toml", cwd=tmp_path)


def test_key_is_never_in_the_config(tmp_path):
    cfg = resolve_config({"model": "m", "api_key_env": "MY_KEY"}, environ={}, cwd=tmp_path)
    assert cfg.api_key({"MY_KEY": "sk-secret"}) == "sk-secret"
    assert "sk-secret" not in str(cfg.stored())
    (tmp_path / "harness.toml").write_text('api_key = "sk-secret"\n')
    with pytest.raises(ConfigError):  # not a setting: keys live in the environment
        resolve_config({}, environ={}, cwd=tmp_path)


def test_endpoint_configured():
    assert not endpoint_configured(RunConfig(), {})
    assert not endpoint_configured(RunConfig(model="gpt"), {})
    assert endpoint_configured(RunConfig(model="gpt"), {"OPENAI_API_KEY": "k"})
    assert endpoint_configured(RunConfig(model="qwen", base_url="http://localhost:8000/v1"), {})
    assert endpoint_configured(RunConfig(model="replay:some/dir"), {})


@pytest.mark.parametrize("cpus, jobs", [(1, 1), (2, 1), (3, 1), (4, 2), (9, 4), (16, 8), (17, 8), (128, 8)])
def test_build_jobs_default_is_half_the_cores_at_least_one_at_most_8(monkeypatch, cpus, jobs):
    monkeypatch.setattr("evaluator.parent.jobserver.usable_cores", lambda: cpus)
    assert RunConfig().jobs is None and Evaluator(EvalOptions(device="cpu")).jobs == jobs


def test_the_cores_builds_count_on_are_the_processs_own_not_the_hosts(monkeypatch):
    """A Slurm or container cpuset (or `taskset`) gives the harness fewer cores than the host has: builds and their
    jobs are counted from those."""
    from evaluator.parent.jobserver import build_slots, default_build_jobs
    from evaluator.wire.identity import usable_cores

    monkeypatch.setattr("os.cpu_count", lambda: 128)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5}, raising=False)
    monkeypatch.setattr("os.sysconf", lambda name: {"SC_PHYS_PAGES": 1 << 28, "SC_PAGE_SIZE": 4096}[name])  # 1 TiB
    monkeypatch.delenv("HARNESS_BUILD_SLOTS", raising=False)
    assert usable_cores() == 6 and build_slots("cuda") == 12 and build_slots("cpu") == 3
    assert default_build_jobs("cpu") == 3 and default_build_jobs("cuda") == 6


def test_a_relative_build_cache_is_made_absolute_where_the_command_ran(monkeypatch, tmp_path):
    """Executors run in folders of their own: a relative cache (`--work .khwork`, HARNESS_CACHE_DIR=cache) would name
    another, empty folder there, and every lane's executor built its candidate again, on the lane's few cores."""
    monkeypatch.chdir(tmp_path)
    evaluator = Evaluator(EvalOptions(device="cpu", cache_dir=Path("cache"), log_root=Path("logs")))
    assert evaluator.cache_dir == tmp_path / "cache" and evaluator.log_root == tmp_path / "logs"
    monkeypatch.setenv("HARNESS_CACHE_DIR", "elsewhere")
    assert Evaluator(EvalOptions(device="cpu")).cache_dir == tmp_path / "elsewhere"


def test_build_jobs_setting_is_used_as_given(monkeypatch):
    monkeypatch.setattr("evaluator.parent.jobserver.usable_cores", lambda: 2)
    assert Evaluator(EvalOptions(device="cpu", jobs=3)).jobs == 3
    assert Evaluator(EvalOptions(device="cpu", jobs=12)).jobs == 12   # the cap of 8 is only the default's
    assert resolve_config({"jobs": 5}, environ={}, cwd=Path("/nonexistent")).jobs == 5
    with pytest.raises(ValueError):
        RunConfig(jobs=0)


def test_the_command_line_says_its_version():
    from typer.testing import CliRunner

    import harness
    from harness.cli.app import app

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"kernelharness {harness.__version__}"


def test_the_example_config_lists_every_setting_and_uncommented_is_valid(tmp_path):
    """harness.example.toml: each RunConfig field (by its name or its flag's), and with every setting
    uncommented it resolves; a key spelled as its flag sets the field."""
    import re

    from harness.core.config import FLAG_NAMES

    example = (Path(__file__).resolve().parent.parent / "harness.example.toml").read_text()
    live = re.sub(r"[ \t]+# .*$", "", example, flags=re.M)
    live = re.sub(r"^# (\[?[\w\"./-]+\]?( = .*)?)$", r"\1", live, flags=re.M)
    (tmp_path / "harness.toml").write_text(live)
    cfg = resolve_config(environ={}, cwd=tmp_path)
    named = {FLAG_NAMES.get(k, k) for k in re.findall(r"^#?\s?(\w+) = ", example, flags=re.M)}
    assert set(RunConfig.model_fields) <= named | {"extra_body", "prices"}, set(RunConfig.model_fields) - named
    assert cfg.request_timeout_s == 600.0 and cfg.max_retries == 4 and cfg.evaluate and cfg.model == "Qwen/Qwen3-32B"
    assert cfg.extra_body == {"reasoning_effort": "high"} and cfg.prices["Qwen/Qwen3-32B"].completion == 0.3
    (tmp_path / "harness.toml").write_text("timeout = 5\nmax-tokens = 7\nretries = 1\n")
    cfg = resolve_config(environ={}, cwd=tmp_path)
    assert (cfg.request_timeout_s, cfg.max_tokens, cfg.max_retries) == (5.0, 7, 1)
    (tmp_path / "harness.toml").write_text("timeout = 5\nrequest_timeout_s = 6\n")
    with pytest.raises(ConfigError, match="set twice"):
        resolve_config(environ={}, cwd=tmp_path)
