"""service-rs as an Inspect AI agent.

The agent runs `service-rs run` headless in the sample's sandbox (Inspect's `local` sandbox runs it on the host, in
the sample's working directory, where service-rs confines it in its own sandbox; a container sandbox needs the
binary and the bundle inside the image). The answer becomes the sample's output, and the tokens the bundle's model
spent, read from the run's ATIF trajectory, its usage. The trajectory itself is kept in the sample's store under
`service_rs_trajectory`, with the run's exit code under `service_rs_exit_code` (`service-rs run --help` lists them).

The bundle's own model answers, not the model given to `inspect eval` (pass `--model mockllm/model` when the task
has no other use for one), so its usage is reported on the sample's output, not in Inspect's per-model totals.

    from service_rs_inspect import service_rs
    Task(dataset=..., solver=service_rs(bundle="builtin/coder"), scorer=..., sandbox="local")
"""

from __future__ import annotations

import json
import uuid

from inspect_ai.agent import Agent, AgentState, agent
from inspect_ai.log import transcript
from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput, ModelUsage
from inspect_ai.util import sandbox, store

# Exit codes of `service-rs run` that still leave a trajectory and an answer worth scoring.
ENDED = {0: "completed", 3: "max_steps", 4: "budget_exceeded", 5: "output_invalid", 124: "timed_out", 130: "interrupted"}


@agent
def service_rs(
    bundle: str = "builtin/coder",
    binary: str = "service-rs",
    timeout: int = 1800,
    approvals: str = "allow",
    sandbox_user: str | None = None,
    max_cost: float | None = None,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> Agent:
    """Run a service-rs bundle on the sample's last user message.

    Args:
      bundle: The bundle reference (`builtin/coder`, an installed name, or a directory).
      binary: The service-rs binary, as the sandbox finds it.
      timeout: Seconds the turn may take (`run --timeout`); the sandbox call waits a little longer.
      approvals: How permission requests are decided, `allow` or `deny` (nobody is there to ask).
      sandbox_user: When service-rs runs as root in a directory only root may enter: the user its sandbox runs
        as (`root` keeps root's rights inside the confinement).
      max_cost: US dollars the turn may spend at the prices of service-rs's config.toml.
      extra_args: More arguments for `service-rs run`.
      env: Environment for the run (provider keys, SERVICE_HOME).
    """

    async def execute(state: AgentState) -> AgentState:
        prompt = next(
            (m.text for m in reversed(state.messages) if isinstance(m, ChatMessageUser)), ""
        )
        if not prompt.strip():
            raise ValueError("the sample has no user message for service-rs to run")
        path = f"/tmp/service-rs-trajectory-{uuid.uuid4().hex}.json"
        cmd = [binary, "run", bundle, "--prompt", prompt, "--quiet", "--trajectory", path]
        cmd += ["--approvals", approvals, "--timeout", f"{timeout}s"]
        if sandbox_user:
            cmd += ["--sandbox-user", sandbox_user]
        if max_cost is not None:
            cmd += ["--max-cost", str(max_cost)]
        cmd += extra_args or []
        result = await sandbox().exec(cmd, env=env or {}, timeout=timeout + 60)
        if result.returncode not in ENDED:
            raise RuntimeError(
                f"service-rs run failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}"
            )
        trajectory = json.loads(await sandbox().read_file(path))
        await sandbox().exec(["rm", "-f", path])
        totals = trajectory.get("final_metrics") or {}
        prompt_tokens = totals.get("total_prompt_tokens") or 0
        cached = totals.get("total_cached_tokens") or 0
        output_tokens = totals.get("total_completion_tokens") or 0
        usage = ModelUsage(
            input_tokens=prompt_tokens - cached,
            input_tokens_cache_read=cached or None,
            output_tokens=output_tokens,
            total_tokens=prompt_tokens + output_tokens,
            total_cost=totals.get("total_cost_usd"),
        )
        model = trajectory.get("agent", {}).get("model_name") or f"service-rs/{bundle}"
        answer = result.stdout.strip()
        state.output = ModelOutput.from_content(model=model, content=answer)
        state.output.usage = usage
        state.messages.append(ChatMessageAssistant(content=answer, model=model))
        store().set("service_rs_trajectory", trajectory)
        store().set("service_rs_exit_code", result.returncode)
        transcript().info(
            f"service-rs run ended {ENDED[result.returncode]} after {len(trajectory.get('steps', []))} steps"
        )
        return state

    return execute
