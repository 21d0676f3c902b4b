"""gpufleet ci github: the workflows are valid GitHub Actions (GitHub's schema, vendored by check-jsonschema), their
gpufleet commands exist, the committed ones are current, and the merge workflow's shell steps for the dev stage
really deploy, record and commit the ledger back: run here in order on a temporary git repository, with stand-ins
for the tools this machine has not (``pulumi``, ``az``, ``kubectl``: each records its arguments and succeeds)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from gpufleet.common.yamldoc import plain
from gpufleet.fleet.ci import BOT_EMAIL, PR_FILE, PROMOTE_FILE, actions, job_id
from tests.conftest import REPO, cli

WORKFLOWS = REPO / ".github" / "workflows"


def load(path: Path) -> dict:
    from ruamel.yaml import YAML

    return plain(YAML(typ="rt").load(path.read_text()))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("workflows")
    result = cli("ci", "github", "-o", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_regenerating_writes_the_same_bytes_and_the_committed_workflows_are_current(generated: Path, tmp_path: Path):
    again = cli("ci", "github", "-o", str(tmp_path))
    assert again.returncode == 0, again.stderr
    for name in (PR_FILE, PROMOTE_FILE):
        assert (tmp_path / name).read_bytes() == (generated / name).read_bytes()
        assert (WORKFLOWS / name).read_bytes() == (generated / name).read_bytes(), (
            f".github/workflows/{name} is out of date with promotion.yaml: run gpufleet ci github"
        )
    assert cli("ci", "github", "--check").returncode == 0
    stale = tmp_path / PR_FILE
    stale.write_text(stale.read_text() + "# edited\n")
    check = cli("ci", "github", "--check", "-o", str(tmp_path))
    assert check.returncode == 1 and PR_FILE in check.stderr


def test_the_workflows_match_githubs_schema(generated: Path):
    schema = json.loads(
        resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("github-workflows.json").read_text()
    )
    for name in (PR_FILE, PROMOTE_FILE):
        jsonschema.validate(load(generated / name), schema)


def test_every_gpufleet_command_in_a_run_step_exists(generated: Path):
    commands = set()
    for name in (PR_FILE, PROMOTE_FILE):
        for job in load(generated / name)["jobs"].values():
            for step in job["steps"]:
                for m in re.finditer(r"\.venv/bin/gpufleet ((?:[a-z]+ ?){1,2})", step.get("run", "")):
                    commands.add(tuple(m.group(1).split()[:2]))
    assert ("promote", "record") in commands and ("diff",) in {c[:1] for c in commands}
    for command in commands:
        words = list(command)
        result = cli(*words, "--help")
        if result.returncode != 0 and len(words) == 2:  # the second word is an argument (a stack name)
            result = cli(words[0], "--help")
        assert result.returncode == 0, f"gpufleet {' '.join(words)} --help: {result.stderr}"


def test_jobs_follow_the_policy_pinned_actions_and_oidc(generated: Path):
    promote = load(generated / PROMOTE_FILE)
    jobs = promote["jobs"]
    # promotion.yaml: dev, staging, then prod in two waves (eastus, then westeurope)
    assert list(jobs) == [job_id(s) for s in ("dev-westeurope", "staging-westeurope", "prod-eastus", "prod-westeurope")]
    assert jobs[job_id("prod-westeurope")]["needs"] == [job_id("prod-eastus")]
    assert jobs[job_id("prod-eastus")]["environment"] == "prod"
    assert all(j["concurrency"]["cancel-in-progress"] is False for j in jobs.values())
    assert promote["permissions"] == {"contents": "write", "id-token": "write"}
    text = (generated / PROMOTE_FILE).read_text() + (generated / PR_FILE).read_text()
    for uses in re.findall(r"uses: (\S+)", text):
        _, _, ref = uses.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", ref), f"{uses} is not pinned to a commit"
    assert all(f"@{a.sha}  # {a.tag}" in text for a in actions().values())
    assert "secrets.AZURE" not in text and "client-secret" not in text  # OIDC federation, no credential


def test_the_dev_stage_deploys_records_and_commits_the_ledger_back(generated: Path, tmp_path: Path):
    """The dev job's shell steps, in order, on a clone of a project with a bare remote: the ``uses:`` steps are
    GitHub's (checkout, cache, Azure login, the Pulumi CLI's install) and ``make setup`` is replaced by this
    virtualenv; the rest runs as written, each with its step's env and the values GitHub would give."""
    remote, work, tools = tmp_path / "remote.git", tmp_path / "work", tmp_path / "bin"
    source = tmp_path / "source"
    source.mkdir()
    for name in ("Pulumi.yaml", "promotion.yaml", "Pulumi.dev-westeurope.yaml"):
        shutil.copy(REPO / name, source / name)

    def run(*args: str, cwd: Path = source) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True, stdin=subprocess.DEVNULL)

    identity = ("-c", "user.name=dev", "-c", "user.email=dev@example.invalid")
    run("git", "init", "-q", "-b", "main")
    run("git", "add", "-A")
    run("git", *identity, "commit", "-q", "-m", "a project")
    run("git", "clone", "-q", "--bare", str(source), str(remote), cwd=tmp_path)
    run("git", "clone", "-q", str(remote), str(work), cwd=tmp_path)
    (work / ".venv").symlink_to(REPO / ".venv")
    tools.mkdir()
    calls = tmp_path / "calls.log"
    for tool in ("pulumi", "az", "kubectl"):  # stand-ins: record the call, succeed (kubectl: no GPU node listed)
        (tools / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{calls}"\nexit 0\n')
        (tools / tool).chmod(0o755)

    job = load(generated / PROMOTE_FILE)["jobs"][job_id("dev-westeurope")]
    github = {"steps.up.outcome": "success", "steps.verify.outcome": "success", "github.ref_name": "main"}
    ran = []
    for step in job["steps"]:
        if "uses" in step or step["run"].strip() == "make setup":
            continue
        env = {k: _expand(v, github) for k, v in step.get("env", {}).items()}
        environment = {**os.environ, **env, "PATH": f"{tools}:{os.environ['PATH']}", "HOME": str(tmp_path)}
        done = subprocess.run(
            ["bash", "-e", "-c", step["run"]],
            cwd=work,
            env=environment,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
        )
        assert done.returncode == 0, f"step {step['name']}: {done.stdout}{done.stderr}"
        ran.append(step["name"])
    assert ran == ["Pulumi up", "Record the deployment", "Verify", "Record the verification", "Commit the ledger"]
    called = calls.read_text()
    assert "pulumi up --stack dev-westeurope --yes --non-interactive" in called and "az aks get-credentials" in called
    # the remote has the bot's commit with both entries
    log = run("git", "log", "-1", "--format=%ae %s", "main", cwd=remote).stdout.strip()
    assert log == f"{BOT_EMAIL} gpufleet: ledger of dev-westeurope"
    ledger = run("git", "show", "main:promotion-ledger.jsonl", cwd=remote).stdout.splitlines()
    entries = [json.loads(line) for line in ledger]
    assert [(e["stack"], e["kind"], e["result"]) for e in entries] == [
        ("dev-westeurope", "deploy", "ok"),
        ("dev-westeurope", "verify", "ok"),
    ]
    assert all(e["note"] == "https://github.example/acme/fleet/actions/runs/42" for e in entries)


def _expand(value: str, github: dict[str, str]) -> str:
    """The ``${{ }}`` expressions the dev job's env uses, as GitHub would evaluate them on a successful run."""
    values = {
        "github.server_url": "https://github.example",
        "github.repository": "acme/fleet",
        "github.run_id": "42",
        "vars.PULUMI_BACKEND_URL": "file://./state",  # what the repository's variables and secrets would hold
        "secrets.PULUMI_CONFIG_PASSPHRASE": "test",
        "vars.AZURE_CLIENT_ID": "00000000-0000-0000-0000-000000000001",
        "vars.AZURE_TENANT_ID": "00000000-0000-0000-0000-000000000002",
        "vars.AZURE_SUBSCRIPTION_ID": "00000000-0000-0000-0000-000000000003",
        **github,
    }

    def one(m: re.Match[str]) -> str:
        expr = m.group(1).strip()
        if expr in values:
            return values[expr]
        cond = re.fullmatch(r"(steps\.\w+\.outcome) == 'success' && 'ok' \|\| 'failed'", expr)
        if cond:
            return "ok" if values[cond.group(1)] == "success" else "failed"
        raise AssertionError(f"an expression the test does not evaluate: {expr}")

    return re.sub(r"\$\{\{(.*?)\}\}", one, str(value))
