"""service-rs as a Harbor installed agent.

`install` puts the service-rs binary (and the bundle, when it is a directory) into the task environment;
`run` runs the bundle headless on the task's instruction, writing an ATIF trajectory into the agent's log
directory; `populate_context_post_run` fills Harbor's context (tokens, cache, cost) from that trajectory, read with
Harbor's own trajectory model.

    harbor run -d terminal-bench@2.0 --agent-import-path service_rs_harbor:ServiceRs \\
        --agent-kwarg bundle=builtin/coder -m openai/gpt-5

Inside a container whose seccomp profile forbids user namespaces, service-rs's own sandbox cannot start: pass
`confine=False` to make the task container the boundary (`--dangerous-sandbox-mode`, said in every run's output).
The run's exit code (`service-rs run --help` lists them) is in the context's metadata; a turn that ran out of
budget or steps is an outcome for the verifier, not an agent error.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from harbor.agents.capabilities import AgentCapabilities
from harbor.agents.installed.base import BaseInstalledAgent, with_prompt_template
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext
from harbor.models.trajectories import Trajectory

# Exit codes of `service-rs run` that end a turn the verifier should still judge.
ENDED = {0: "completed", 3: "max_steps", 4: "budget_exceeded", 5: "output_invalid", 124: "timed_out", 130: "interrupted"}
# Provider keys the run may need, passed through from Harbor's environment when set.
KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


class ServiceRs(BaseInstalledAgent):
    """A service-rs bundle, run headless in the task environment."""

    capabilities = AgentCapabilities(atif=True)

    def __init__(
        self,
        logs_dir: Path,
        bundle: str = "builtin/coder",
        binary: str | None = None,
        install_dir: str = "/installed-agent",
        confine: bool = True,
        approvals: str = "allow",
        sandbox_user: str | None = None,
        timeout_sec: int = 3600,
        **kwargs,
    ):
        super().__init__(logs_dir, **kwargs)
        self._bundle = bundle
        self._binary = binary or shutil.which("service-rs")
        self._install_dir = install_dir.rstrip("/")
        self._confine = confine
        self._approvals = approvals
        self._sandbox_user = sandbox_user
        self._timeout_sec = timeout_sec

    @staticmethod
    def name() -> str:
        return "service-rs"

    @property
    def _bin(self) -> str:
        return f"{self._install_dir}/service-rs"

    def get_version_command(self) -> str | None:
        return f"{shlex.quote(self._bin)} --version"

    def parse_version(self, stdout: str) -> str:
        return stdout.strip().split()[-1] if stdout.strip() else ""

    async def install(self, environment: BaseEnvironment) -> None:
        if not self._binary or not Path(self._binary).is_file():
            raise RuntimeError(
                "no service-rs binary to install: put service-rs on PATH or pass --agent-kwarg binary=PATH"
            )
        await self.exec_as_root(environment, command=f"mkdir -p {shlex.quote(self._install_dir)}")
        await environment.upload_file(self._binary, self._bin)
        await self.exec_as_root(environment, command=f"chmod 755 {shlex.quote(self._bin)}")
        if Path(self._bundle).is_dir():
            target = f"{self._install_dir}/bundle"
            await environment.upload_dir(self._bundle, target)
            self._bundle = target

    @with_prompt_template
    async def run(self, instruction: str, environment: BaseEnvironment, context: AgentContext) -> None:
        logs = str(self.environment_logs_dir)
        args = [self._bin, "run", self._bundle, "--prompt", instruction, "--quiet"]
        args += ["--approvals", self._approvals, "--timeout", f"{self._timeout_sec}s"]
        args += ["--trajectory", f"{logs}/trajectory.json", "--output-last-message", f"{logs}/answer.txt"]
        if self.model_name:
            args += ["--model", self.model_name]
        if not self._confine:
            args.append("--dangerous-sandbox-mode")
        if self._sandbox_user:
            args += ["--sandbox-user", self._sandbox_user]
        env = {"SERVICE_HOME": f"{self._install_dir}/home"}
        env.update({k: os.environ[k] for k in KEYS if k in os.environ})
        command = (
            f"mkdir -p {shlex.quote(logs)}; "
            f"{shlex.join(args)} > {shlex.quote(logs)}/service-rs.txt 2>&1; "
            f"echo $? > {shlex.quote(logs)}/exit-code"
        )
        await self.exec_as_agent(environment, command=command, env=env, timeout_sec=self._timeout_sec + 120)

    def populate_context_post_run(self, context: AgentContext) -> None:
        code_file = self.logs_dir / "exit-code"
        code = int(code_file.read_text().strip()) if code_file.is_file() else None
        context.metadata = {**(context.metadata or {}), "service_rs_exit_code": code}
        trajectory_file = self.logs_dir / "trajectory.json"
        if not trajectory_file.is_file():
            log = self.logs_dir / "service-rs.txt"
            said = log.read_text()[-2000:] if log.is_file() else ""
            raise RuntimeError(f"service-rs run left no trajectory (exit {code}): {said}")
        trajectory = Trajectory.model_validate_json(trajectory_file.read_text())
        totals = trajectory.final_metrics
        if totals is not None:
            context.n_input_tokens = totals.total_prompt_tokens
            context.n_cache_tokens = totals.total_cached_tokens
            context.n_output_tokens = totals.total_completion_tokens
            context.cost_usd = totals.total_cost_usd
        context.metadata["service_rs_outcome"] = ENDED.get(code, "failed") if code is not None else None
        context.metadata["service_rs_steps"] = len(trajectory.steps)
