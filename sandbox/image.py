"""The sandbox image: its name, which changes with the code that runs in it, and how the project builds it.

The name is `crucible-sandbox:<version>-<hash>`, the hash taken over every file of the packages the worker
imports (sandbox, targets, verifiers) and the pinned runtime dependencies, so an image built from older
code or other library versions is never run: it is simply not found, and the backend says how to build one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

import docker
from docker.errors import DockerException, ImageNotFound

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "crucible"
REPOSITORY = "crucible-sandbox"
LABEL = "org.crucible.sandbox"
"""Set on the images and on every container of the Docker backend."""
IMAGE_EXTRAS = ("torch",)
"""Extras the image carries when they are installed where it is built: engine jobs (crucible validate) run
real kernels with torch in the sandbox like any other job; without the extra here, the image has none."""
IMAGE_PACKAGES = ("sandbox", "targets", "verifiers")
"""What the worker imports inside the container: the files whose content names the image."""
DOCKERFILE = Path(__file__).with_name("Dockerfile")
ONLINE_BASE = "python:3.11-slim-bookworm"
OFFLINE_BASE = "crucible-sandbox-base:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_PACKAGES = ("python3", "python3-venv")
PYTHON = "3.11"
GLIBC_MINOR = 36
"""Both bases are Debian bookworm (CPython 3.11, glibc 2.36): the wheelhouse is for them, not for the host."""
BUILD_COMMAND = "crucible sandbox build (or --offline on an air-gapped host: needs root and debootstrap)"

Log = Callable[[str], None]


class BuildError(RuntimeError):
    """The image could not be built; the message names the step and the reason."""


def image_name() -> str:
    """The image for the code and dependencies installed here."""
    digest = hashlib.sha256()
    for package in IMAGE_PACKAGES:
        folder = PROJECT_ROOT / package
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(PROJECT_ROOT)
            if path.is_file() and "__pycache__" not in relative.parts:
                digest.update(relative.as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for pin in pinned_dependencies():
        digest.update(pin.encode() + b"\n")
    return f"{REPOSITORY}:{importlib.metadata.version(DISTRIBUTION)}-{digest.hexdigest()[:12]}"


def runtime_requirements() -> tuple[str, ...]:
    """The project's run-time requirements, and those of each IMAGE_EXTRAS extra installed here."""
    declared = importlib.metadata.requires(DISTRIBUTION) or ()
    wanted = [r for r in declared if not _for_extra(r)]
    for extra in IMAGE_EXTRAS:
        theirs = [r.split(";")[0].strip() for r in declared if _extra_of(r) == extra]
        if theirs and all(_installed(_name(r)) for r in theirs):
            wanted += theirs
    return tuple(wanted)


def pinned_dependencies() -> tuple[str, ...]:
    """`name==version` of every installed distribution the project needs at run time, transitively.

    The image installs these same versions, so a job gives the same numbers in a container as in a local
    process (Optuna's sampler and numba's code generation both change between releases).
    """
    pins: dict[str, str] = {}
    todo = [_name(r) for r in runtime_requirements()]
    while todo:
        name = todo.pop()
        if name in pins:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a marker left it out on this platform; pip resolves it for the image if needed
        pins[name] = dist.version
        todo += [_name(r) for r in dist.requires or () if not _for_extra(r)]
    return tuple(f"{name}=={version}" for name, version in sorted(pins.items()))


def has_image(client: docker.DockerClient, name: str) -> bool:
    try:
        client.images.get(name)
    except ImageNotFound:
        return False
    return True


def build(offline: bool, log: Log, mirror: str = DEBIAN_MIRROR, rebuild: bool = False) -> str:
    """Build the image for this source and return its name; BuildError says what failed.

    An image of this name holds exactly this code and these pins, so it is kept unless `rebuild` is asked.
    """
    if not (PROJECT_ROOT / "pyproject.toml").is_file():
        raise BuildError(f"building the image needs a source checkout; no pyproject.toml in {PROJECT_ROOT}")
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as exc:
        raise BuildError(f"no Docker engine answers: {exc}") from None
    name = image_name()
    if not rebuild and has_image(client, name):
        log(f"{name} is up to date (its name hashes the code and pins it holds; --rebuild builds it again)")
        return name
    base = _offline_base(client, mirror, log) if offline else ONLINE_BASE
    with tempfile.TemporaryDirectory(prefix="crucible-image-") as folder:
        context = Path(folder)
        _context(context, log)
        log(f"building {name} on {base} (no network inside the build)")
        tail: deque[str] = deque(maxlen=5)
        try:
            for chunk in client.api.build(
                path=str(context),
                tag=name,
                buildargs={"BASE": base},
                labels={LABEL: name},
                network_mode="none",
                rm=True,
                forcerm=True,
                decode=True,
            ):
                if "error" in chunk:
                    said = " | ".join(tail)
                    raise BuildError(f"docker build of {name}: {chunk['error'].strip()}; last output: {said}")
                line = str(chunk.get("stream", "")).rstrip()
                if line:
                    log(line)
                    tail.append(line)
        except DockerException as exc:
            raise BuildError(f"docker build of {name}: {exc}") from None
    return name


def _context(context: Path, log: Log) -> None:
    """The build context: the Dockerfile, the project's wheel, and a wheelhouse of its pinned dependencies."""
    shutil.copy(DOCKERFILE, context / "Dockerfile")
    log("building the project wheel")
    source = _source_copy(context / "source")
    _pip(["wheel", "--quiet", "--no-deps", "--wheel-dir", str(context / "project"), str(source)])
    shutil.rmtree(source)
    deps = context / "deps"
    deps.mkdir()
    (deps / "requirements.txt").write_text("\n".join(runtime_requirements()) + "\n")
    (deps / "constraints.txt").write_text("\n".join(pinned_dependencies()) + "\n")
    log(f"downloading wheels of the runtime dependencies for CPython {PYTHON} (as pinned here)")
    machine = platform.machine()
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 4, -1)]
    platforms += [f"manylinux{legacy}_{machine}" for legacy in ("2014", "2010", "1")]
    _pip(
        [
            "download",
            "--quiet",
            "--only-binary=:all:",
            "--python-version",
            PYTHON,
            "--implementation",
            "cp",
            "--abi",
            "cp" + PYTHON.replace(".", ""),
            *(arg for tag in platforms for arg in ("--platform", tag)),
            "--dest",
            str(deps),
            "-r",
            str(deps / "requirements.txt"),
            "-c",
            str(deps / "constraints.txt"),
        ]
    )


def _source_copy(dest: Path) -> Path:
    """What the wheel is built from, copied so the build leaves nothing in the checkout."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PROJECT_ROOT / name, dest / name)
    for folder in PROJECT_ROOT.iterdir():
        if (folder / "__init__.py").is_file():
            shutil.copytree(folder, dest / folder.name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _offline_base(client: docker.DockerClient, mirror: str, log: Log) -> str:
    """A Debian root with Python made by debootstrap and imported as an image; reused once it exists."""
    if has_image(client, OFFLINE_BASE):
        log(f"reusing {OFFLINE_BASE} (remove it with docker rmi to make a fresh root)")
        return OFFLINE_BASE
    if os.geteuid() != 0:
        raise BuildError("the offline build runs debootstrap, which needs root")
    if shutil.which("debootstrap") is None:
        raise BuildError("the offline build needs debootstrap (apt-get install debootstrap)")
    work = Path(tempfile.mkdtemp(prefix="crucible-rootfs-"))
    root = work / "root"
    try:
        log(f"debootstrap {DEBIAN_SUITE} from {mirror} (about a minute)")
        packages = ",".join(DEBIAN_PACKAGES)
        _run(
            ["debootstrap", "--variant=minbase", f"--include={packages}", DEBIAN_SUITE, str(root), mirror],
            "debootstrap",
        )
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / cache).glob("*"):
                if entry.is_file():
                    entry.unlink()
        tarball = work / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(tarball), "."], "tar of the root")
        log(f"importing the root as {OFFLINE_BASE}")
        repository, tag = OFFLINE_BASE.split(":")
        client.api.import_image_from_file(
            str(tarball),
            repository=repository,
            tag=tag,
            changes=[
                "ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                f"LABEL {LABEL}=base",
                'CMD ["python3"]',
            ],
        )
    except DockerException as exc:
        raise BuildError(f"docker import of the root: {exc}") from None
    finally:
        if _unmount_below(root):
            shutil.rmtree(work)
        else:
            log(f"left {work} in place: something is still mounted below it")
    return OFFLINE_BASE


def _unmount_below(root: Path) -> bool:
    """Detach what a failed debootstrap left mounted in the root (/proc, a bind of /dev); True if none is."""
    prefix = str(root.resolve()) + "/"
    for _ in range(2):
        with open("/proc/self/mountinfo", encoding="utf-8") as mounts:
            points = [line.split()[4] for line in mounts]
        below = sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)
        if not below:
            return True
        for point in below:
            subprocess.run(["umount", "--lazy", point], check=False, capture_output=True)
    return False


def _pip(args: list[str]) -> None:
    _run([sys.executable, "-m", "pip", *args], f"pip {args[0]}")


def _run(command: list[str], what: str) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise BuildError(f"{what} failed (exit {done.returncode}): {tail}")


def _name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def _for_extra(requirement: str) -> bool:
    return _extra_of(requirement) is not None


def _extra_of(requirement: str) -> str | None:
    match = re.search(r";.*\bextra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
    return match.group(1) if match else None


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True
