"""EGG as a library and as a command: quiet unless asked, logs through handlers the caller owns,
messages printed literally, `--version`, shell completion."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]

RUN_WITH_FAKES = """
import sys; sys.path.insert(0, 'tests')
from tests_flow_probe import run_once
{before}
run_once()
{after}
"""


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )


def test_the_python_api_prints_nothing_unless_asked():
    r = _python(RUN_WITH_FAKES.format(before="", after=""))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "" and r.stderr == "", (r.stdout[-1000:], r.stderr[-1000:])


def test_a_callers_stdlib_handler_receives_the_events_with_their_fields():
    before = """
import logging
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append((record.name, record.levelname, record.getMessage(), getattr(record, "egg_fields", None)))
logging.getLogger("egg").addHandler(Keep())
logging.getLogger("egg").setLevel(logging.INFO)
"""
    after = """
import json
print(json.dumps(seen, default=str))
"""
    r = _python(RUN_WITH_FAKES.format(before=before, after=after))
    assert r.returncode == 0, r.stderr[-2000:]
    seen = json.loads(r.stdout)
    starts = [s for s in seen if s[2].startswith("stage.start ")]
    assert starts and all(s[0] == "egg" and s[1] == "INFO" for s in starts)
    assert "stage=algorithm" in starts[0][2] and starts[0][3]["stage"] == "algorithm"
    assert any(s[2].startswith("finalize ") for s in seen)
    assert r.stderr == "", r.stderr[-1000:]


def test_an_application_that_configured_structlog_keeps_its_configuration():
    before = """
import structlog
lines = []
structlog.configure(processors=[lambda l, m, e: lines.append(e["event"]) or ""],
                    logger_factory=structlog.ReturnLoggerFactory())
"""
    after = "print(len(lines) > 0)"
    r = _python(RUN_WITH_FAKES.format(before=before, after=after))
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "True"


def test_messages_print_literally(capsys):
    from graph import cli

    report = {
        "task": "t[1]",
        "device": "cpu",
        "verified": False,
        "failure": "nondeterministic reference [rand_like]; candidate [verified] [bold]no[/]",
        "stages": [
            {
                "stage": "algorithm",
                "outcome": "failed",
                "changed": "[verified] nothing",
                "speedup_entry": None,
                "speedup_exit": None,
            }
        ],
    }
    cli._print_summary(report, Path("o"))
    with pytest.raises(typer.Exit):
        cli._fail_bad_input("reference uses [rand_like]")
    out, err = capsys.readouterr()
    assert "[rand_like]; candidate [verified] [bold]no[/]" in out
    assert "[verified] nothing" in out and "t[1]" in out
    assert "error: reference uses [rand_like]" in err
    # a long message stays one line (the reason a nondeterministic reference is refused is ~250 chars)
    long = "the reference is nondeterministic: " + " ".join(["two runs differ"] * 30)
    with pytest.raises(typer.Exit):
        cli._fail_bad_input(long)
    _, err = capsys.readouterr()
    assert err.strip() == f"error: {long}"


def _egg(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graph.cli", *args], cwd=ROOT, env={**os.environ, **env}, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip


def test_version_and_shell_completion():
    from importlib import metadata

    v = _egg("--version")
    assert v.returncode == 0 and v.stdout.strip() == f"egg {metadata.version('egg-kernels')}"
    # the script `egg --install-completion` installs, asked for directly (`--show-completion`
    # guesses the shell from the parent process, which under make or CI is sh)
    c = _egg(_EGG_COMPLETE="source_bash")
    assert c.returncode == 0 and "_EGG_COMPLETE=complete_bash" in c.stdout, c.stdout + c.stderr
    assert "complete -o default -F _egg_completion egg" in c.stdout
    words = _egg(_EGG_COMPLETE="complete_bash", COMP_WORDS="egg re", COMP_CWORD="1")
    assert {"resume", "replay"} <= set(words.stdout.split()), words.stdout + words.stderr
    h = _egg("--help")
    assert "--install-completion" in h.stdout and "resume" in h.stdout


def test_every_command_logs_to_stderr_only():
    """A tool's log line (here the toolbox's, as on a GPU) never lands in a command's stdout."""
    code = (
        "import sys, structlog\n"
        "from graph import cli\n"
        "@cli.app.command()\n"
        "def probe():\n"
        "    structlog.get_logger('egg.tools').warning('tool.evaluate', wall_s=1.0)\n"
        "    print('{\"ok\": true}')\n"
        "sys.argv = ['egg', 'probe']\n"
        "cli.main()\n"
    )
    r = _python(code)
    assert r.stdout == '{"ok": true}\n', r.stdout
    assert "tool.evaluate wall_s=1.0" in r.stderr
