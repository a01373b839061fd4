"""Drives the Harbor adapter (adapters/harbor/service_rs_harbor.py) the way a Harbor trial does: setup, run,
populate_context_post_run, against an environment that runs commands in a local directory. Harbor's container
environments cannot run on the test machine; this stand-in is built on Harbor's own `BaseEnvironment`, so the
adapter meets the interface it meets in a real trial.

    python harbor_local.py WORKDIR LOGS_DIR INSTALL_DIR BUNDLE BINARY INSTRUCTION

Prints the filled AgentContext as JSON on stdout.
"""

import asyncio
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.models.agent.context import AgentContext
from service_rs_harbor import ServiceRs


class LocalEnvironment(BaseEnvironment):
    """A task environment that is a directory on this machine."""

    def __init__(self, workdir: Path):
        # Harbor's constructor reads a task's environment definition; this stand-in has none.
        self.workdir = workdir
        self.default_user = None
        self.logger = logging.getLogger("harbor-local")

    @staticmethod
    def type() -> str:
        return "local-stand-in"

    def _validate_definition(self):
        pass

    async def start(self, force_build: bool) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)

    async def stop(self, delete: bool):
        pass

    async def upload_file(self, source_path, target_path: str):
        Path(target_path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source_path, target_path)

    async def upload_dir(self, source_dir, target_dir: str):
        shutil.copytree(source_dir, target_dir, dirs_exist_ok=True)

    async def download_file(self, source_path: str, target_path):
        shutil.copy(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir):
        shutil.copytree(source_dir, target_dir, dirs_exist_ok=True)

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None) -> ExecResult:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or self.workdir,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_sec,
        )
        return ExecResult(stdout=done.stdout, stderr=done.stderr, return_code=done.returncode)


async def main() -> None:
    workdir, logs, install, bundle, binary, instruction = sys.argv[1:7]
    environment = LocalEnvironment(Path(workdir))
    await environment.start(force_build=False)
    agent = ServiceRs(
        logs_dir=Path(logs),
        environment_logs_dir=PurePosixPath(logs),
        bundle=bundle,
        binary=binary,
        install_dir=install,
        sandbox_user="root" if os.geteuid() == 0 else None,
    )
    await agent.setup(environment)
    context = AgentContext()
    await agent.run(instruction, environment, context)
    agent.populate_context_post_run(context)
    print(context.model_dump_json())


asyncio.run(main())
