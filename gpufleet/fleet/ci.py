"""GitHub Actions workflows from ``promotion.yaml`` and the stacks: ``gpufleet ci github`` (docs/ci.md).

Two workflows, as data, written as YAML the same way every time (regenerating gives the same bytes):

- ``gpufleet-pr.yml``, on a pull request: ``make setup`` (its downloads cached), ``gpufleet validate``, ``audit`` of
  each AKS stack, ``render`` of each (uploaded), ``gpufleet diff --format markdown`` posted as the pull request's
  comment, then per changed stack ``gpufleet preflight`` and ``pulumi preview`` (when Azure credentials are set up);
- ``gpufleet-promote.yml``, on a push to the default branch: one job per stack, in the policy's stage and wave order
  (a wave waits for the wave before it), each bound to the GitHub environment named after its stage (production
  stages get required reviewers there) and alone on its stack (``concurrency``): ``pulumi up``, ``gpufleet promote
  record --kind deploy``, then the check its kind of stack has (the verify playbook on bare-metal hosts; GPU nodes
  Ready on AKS) recorded with ``--kind verify``, and the ledger committed back by the bot (rebased, never forced).

Azure login is OIDC federation (``azure/login`` with the client, tenant and subscription ids from repository
variables; ``id-token: write``): no secret in the repository. Pulumi's backend comes from the variable
``PULUMI_BACKEND_URL``, its passphrase from the secret ``PULUMI_CONFIG_PASSPHRASE``. Every value from GitHub reaches
a shell step through ``env:``, never pasted into the script (no injection from a branch name or a title).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from io import StringIO
from typing import Any

from gpufleet.catalog import read_catalog_yaml

VENV = ".venv/bin"
RUNNER = "ubuntu-24.04"
CACHE_KEY = "gpufleet-${{ runner.os }}-${{ hashFiles('pyproject.toml', 'gpufleet/catalog/charts.yaml', 'scripts/*') }}"
BOT_NAME = "github-actions[bot]"
BOT_EMAIL = "41898282+github-actions[bot]@users.noreply.github.com"  # GitHub's documented identity of the bot
LEDGER = "promotion-ledger.jsonl"
RUN_URL = "${{ github.server_url }}/${{ github.repository }}/actions/runs/${{ github.run_id }}"
PR_FILE = "gpufleet-pr.yml"
PROMOTE_FILE = "gpufleet-promote.yml"


@dataclass(frozen=True)
class CiStack:
    """What the workflows need of a stack."""

    name: str
    stage: str
    aks: bool
    inventory: str | None  # its bare-metal inventory (None: no bare-metal hosts)
    resource_group: str | None = None  # its AKS cluster (for the GPU node check)
    cluster: str | None = None


@dataclass(frozen=True)
class Action:
    uses: str
    sha: str
    tag: str

    @property
    def ref(self) -> str:
        return f"{self.uses}@{self.sha}"


@lru_cache(maxsize=1)
def actions() -> dict[str, Action]:
    """The pinned third-party actions (gpufleet/catalog/ci_actions.yaml)."""
    return {name: Action(**entry) for name, entry in read_catalog_yaml("ci_actions.yaml")["actions"].items()}


def _uses(action: str, **with_: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"uses": actions()[action].ref}
    if with_:
        step["with"] = with_
    return step


def _setup_steps() -> list[dict[str, Any]]:
    return [
        {"name": "Check out", **_uses("checkout", **{"fetch-depth": 0})},
        {"name": "Cache downloads", **_uses("cache", path="~/.cache/gpufleet", key=CACHE_KEY)},
        {"name": "Set up gpufleet", "run": "make setup"},
    ]


def _azure_login() -> dict[str, Any]:
    return {
        "name": "Azure login (OIDC)",
        **_uses(
            "azure_login",
            **{
                "client-id": "${{ vars.AZURE_CLIENT_ID }}",
                "tenant-id": "${{ vars.AZURE_TENANT_ID }}",
                "subscription-id": "${{ vars.AZURE_SUBSCRIPTION_ID }}",
            },
        ),
    }


PULUMI_ENV = {
    "PULUMI_BACKEND_URL": "${{ vars.PULUMI_BACKEND_URL }}",
    "PULUMI_CONFIG_PASSPHRASE": "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}",
    "ARM_USE_OIDC": "true",
    "ARM_CLIENT_ID": "${{ vars.AZURE_CLIENT_ID }}",
    "ARM_TENANT_ID": "${{ vars.AZURE_TENANT_ID }}",
    "ARM_SUBSCRIPTION_ID": "${{ vars.AZURE_SUBSCRIPTION_ID }}",
}


def pr_workflow(stacks: list[CiStack]) -> dict[str, Any]:
    aks = [s.name for s in stacks if s.aks]
    review_steps = [
        *_setup_steps(),
        {"name": "Validate every stack", "run": f"{VENV}/gpufleet validate"},
    ]
    if aks:
        review_steps += [
            {"name": "Audit AKS stacks", "run": "\n".join(f"{VENV}/gpufleet audit {s}" for s in aks) + "\n"},
            {
                "name": "Render",
                "run": "\n".join(f"{VENV}/gpufleet render {s} -o render/{s}" for s in aks) + "\n",
            },
            {"name": "Upload the render", **_uses("upload_artifact", name="gpufleet-render", path="render/")},
        ]
    review_steps += [
        {
            "name": "What the change does",
            "id": "diff",
            "env": {"BASE_REF": "${{ github.base_ref }}"},
            "run": (
                f'{VENV}/gpufleet diff --base "origin/$BASE_REF" --format markdown > gpufleet-diff.md\n'
                f'stacks=$({VENV}/gpufleet diff --base "origin/$BASE_REF" --format json | jq -c "[.stacks[].stack]")\n'
                'echo "stacks=$stacks" >> "$GITHUB_OUTPUT"\n'
            ),
        },
        {
            "name": "Comment on the pull request",
            "env": {"GH_TOKEN": "${{ github.token }}", "PR": "${{ github.event.pull_request.number }}"},
            "run": (
                'gh pr comment "$PR" --body-file gpufleet-diff.md --edit-last'
                ' || gh pr comment "$PR" --body-file gpufleet-diff.md\n'
            ),
        },
    ]
    preview_steps = [
        *_setup_steps(),
        _azure_login(),
        {"name": "Install the Pulumi CLI", **_uses("pulumi")},
        {"name": "Preflight", "env": {"STACK": "${{ matrix.stack }}"}, "run": f'{VENV}/gpufleet preflight "$STACK"\n'},
        {
            "name": "Pulumi preview",
            "env": {"STACK": "${{ matrix.stack }}", **PULUMI_ENV},
            "run": 'pulumi preview --stack "$STACK" --non-interactive --diff\n',
        },
    ]
    return {
        "name": "gpufleet pull request",
        "on": {"pull_request": {}},
        "permissions": {"contents": "read", "id-token": "write", "pull-requests": "write"},
        "concurrency": {"group": "gpufleet-pr-${{ github.event.pull_request.number }}", "cancel-in-progress": True},
        "jobs": {
            "review": {
                "runs-on": RUNNER,
                "timeout-minutes": 60,
                "outputs": {"stacks": "${{ steps.diff.outputs.stacks }}"},
                "steps": review_steps,
            },
            "preview": {
                "needs": "review",
                "if": "needs.review.outputs.stacks != '[]' && vars.AZURE_CLIENT_ID != ''",
                "runs-on": RUNNER,
                "timeout-minutes": 60,
                "strategy": {"fail-fast": False, "matrix": {"stack": "${{ fromJSON(needs.review.outputs.stacks) }}"}},
                "steps": preview_steps,
            },
        },
    }


def job_id(stack: str) -> str:
    return "deploy-" + re.sub(r"[^A-Za-z0-9_-]", "-", stack)


def _verify_steps(stack: CiStack) -> list[dict[str, Any]]:
    if stack.inventory is not None:
        run = (
            f"{VENV}/ansible-playbook -i {stack.inventory} ansible/playbooks/verify.yml"
            " -e gpufleet_verify_report_file=verify-report.json\n"
        )
        record = f"{VENV}/gpufleet promote record {stack.name} --kind verify --report verify-report.json\n"
    else:
        run = (
            f"az aks get-credentials --resource-group {stack.resource_group} --name {stack.cluster}"
            " --overwrite-existing\n"
            "# every GPU node of the stack's pools Ready (a pool scaled to zero has none)\n"
            "if kubectl get nodes -l gpufleet.io/pool -o name | grep -q .; then\n"
            "  kubectl wait --for=condition=Ready node -l gpufleet.io/pool --timeout=15m\n"
            "fi\n"
        )
        record = f'{VENV}/gpufleet promote record {stack.name} --kind verify --result "$RESULT" --note "$RUN_URL"\n'
    return [
        {"name": "Verify", "id": "verify", "run": run},
        {
            "name": "Record the verification",
            "if": "always() && steps.verify.outcome != 'skipped'",
            "env": {"RESULT": "${{ steps.verify.outcome == 'success' && 'ok' || 'failed' }}", "RUN_URL": RUN_URL},
            "run": record,
        },
    ]


def _deploy_job(stack: CiStack, needs: list[str]) -> dict[str, Any]:
    steps = [*_setup_steps()]
    if stack.aks:
        steps.append(_azure_login())
    steps += [
        {"name": "Install the Pulumi CLI", **_uses("pulumi")},
        {
            "name": "Pulumi up",
            "id": "up",
            "env": PULUMI_ENV,
            "run": f"pulumi up --stack {stack.name} --yes --non-interactive\n",
        },
        {
            "name": "Record the deployment",
            "if": "always() && steps.up.outcome != 'skipped'",
            "env": {"RESULT": "${{ steps.up.outcome == 'success' && 'ok' || 'failed' }}", "RUN_URL": RUN_URL},
            "run": f'{VENV}/gpufleet promote record {stack.name} --kind deploy --result "$RESULT" --note "$RUN_URL"\n',
        },
        *_verify_steps(stack),
        {
            "name": "Commit the ledger",
            "if": "always() && steps.up.outcome != 'skipped'",
            "env": {"BRANCH": "${{ github.ref_name }}", "STACK": stack.name},
            "run": (
                f'git config user.name "{BOT_NAME}"\n'
                f'git config user.email "{BOT_EMAIL}"\n'
                f"git add {LEDGER}\n"
                f'git diff --cached --quiet || git commit -m "gpufleet: ledger of $STACK"\n'
                "for attempt in 1 2 3; do\n"
                '  if git pull --rebase origin "$BRANCH" && git push origin "HEAD:$BRANCH"; then exit 0; fi\n'
                "  sleep $((attempt * 5))\n"
                "done\n"
                "exit 1\n"
            ),
        },
    ]
    job: dict[str, Any] = {}
    if needs:
        job["needs"] = needs
    job |= {
        "runs-on": RUNNER,
        "timeout-minutes": 180,
        "environment": stack.stage,
        "concurrency": {"group": f"gpufleet-stack-{stack.name}", "cancel-in-progress": False},
        "steps": steps,
    }
    return job


def promote_workflow(stacks: dict[str, CiStack], waves: list[list[str]]) -> dict[str, Any]:
    """``waves``: the policy's stacks, wave by wave in promotion order (each wave's stacks deploy side by side)."""
    jobs: dict[str, Any] = {}
    before: list[str] = []
    for wave in waves:
        present = [s for s in wave if s in stacks]
        for name in present:
            jobs[job_id(name)] = _deploy_job(stacks[name], [job_id(s) for s in before])
        before = present or before
    return {
        "name": "gpufleet promote",
        "on": {"push": {"branches": ["${DEFAULT_BRANCH}"], "paths-ignore": [LEDGER]}, "workflow_dispatch": {}},
        "permissions": {"contents": "write", "id-token": "write"},
        "jobs": jobs,
    }


def _literal(value: Any) -> Any:
    """Multi-line strings (the scripts) as YAML literal blocks."""
    from ruamel.yaml.scalarstring import LiteralScalarString

    if isinstance(value, dict):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return LiteralScalarString(value)
    return value


def dump(workflow: dict[str, Any], default_branch: str = "main") -> str:
    """The workflow as YAML: keys in the order built, each pinned action with its tag as a comment."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = StringIO()
    yaml.dump(_literal(workflow), buffer)
    text = buffer.getvalue().replace("${DEFAULT_BRANCH}", default_branch)
    for action in actions().values():
        text = text.replace(f"uses: {action.ref}\n", f"uses: {action.ref}  # {action.tag}\n")
    head = "# Generated by `gpufleet ci github` from promotion.yaml and the stack files: do not edit; regenerate.\n"
    return head + text


def workflows(stacks: dict[str, CiStack], waves: list[list[str]], default_branch: str = "main") -> dict[str, str]:
    """File name -> text of each workflow."""
    ordered = [stacks[s] for wave in waves for s in wave if s in stacks]
    return {
        PR_FILE: dump(pr_workflow(ordered), default_branch),
        PROMOTE_FILE: dump(promote_workflow(stacks, waves), default_branch),
    }
