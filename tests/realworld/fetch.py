#!/usr/bin/env python3
"""Download the pinned public Inmanta modules of modules.tsv and unpack their sources.

Usage:
    fetch.py [--cache DIR] [--list FILE]

Defaults: the list is modules.tsv next to this script and the cache is .cache/ next to it.

For every module in the list this downloads the wheel `inmanta-module-<package>==<version>`
from PyPI with `python3 -m pip download` (the interpreter running this script), checks its
sha256 against the list, and unpacks the module the way an installed v2 module looks, with
the `inmanta_plugins/<module>/` prefix removed:

    DIR/wheels/<wheel>.whl          the downloaded wheels
    DIR/<module>/model/**.cf        model code (`_init.cf` is the module's root namespace)
    DIR/<module>/templates/**       compile-time assets, when the module has them
    DIR/<module>/files/**
    DIR/<module>/setup.cfg          module metadata
    DIR/<module>/**.py              the Python plugins
    DIR/cf_files.txt                every .cf file, relative to DIR, sorted, one per line
    DIR/complete.stamp              a copy of the module list, written last

The script is idempotent: wheels that are present with the right hash are not downloaded
again, and when complete.stamp equals the module list nothing at all is done, so callers
(the `realworld` integration test) can use the stamp to decide whether to run it.

Only the Python standard library is used. Exit status: 0 on success, 1 when a download fails
or a wheel does not match its hash, 2 on bad usage.
"""

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
STAMP = "complete.stamp"

# The modules are pure-Python wheels, but pip still checks `Requires-Python` against the
# interpreter it runs on. std 8.7.5 requires Python >= 3.12 and CI runs 3.11, so the target
# version is given explicitly; pip then insists on wheels only, which is what we want anyway.
TARGET_PYTHON = "3.12"

# Parts of `inmanta_plugins/<module>/` that are unpacked as whole trees.
TREES = ("model", "templates", "files")


class FetchError(Exception):
    """A problem the user has to fix; the message says what went wrong."""


def read_list(path):
    """Returns (module, package, version, sha256) for each non-comment line of the list."""
    modules = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            if len(fields) < 4:
                raise FetchError(f"{path}:{number}: expected at least 4 tab-separated columns")
            module, package, version, sha256 = fields[:4]
            modules.append((module, package, version, sha256.lower()))
    return modules


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_prefix(package, version):
    """The start of the wheel's file name: wheel names spell `-` in the project name as `_`."""
    return f"inmanta_module_{package.replace('-', '_')}-{version}-"


def find_wheel(wheels_dir, package, version):
    """The downloaded wheel of package==version, or None."""
    prefix = wheel_prefix(package, version)
    matches = sorted(n for n in os.listdir(wheels_dir) if n.startswith(prefix) and n.endswith(".whl"))
    return os.path.join(wheels_dir, matches[0]) if matches else None


def download(wheels_dir, missing):
    """Downloads the `missing` (package, version) pairs with a single pip run, because
    starting pip costs more than downloading one of these small wheels."""
    requirements = [f"inmanta-module-{package}=={version}" for package, version in missing]
    command = [
        sys.executable, "-m", "pip", "download",
        "--quiet", "--disable-pip-version-check",
        "--no-deps", "--only-binary=:all:", "--python-version", TARGET_PYTHON,
        "--dest", wheels_dir,
        *requirements,
    ]
    print(f"fetch.py: downloading {len(requirements)} wheel(s) from PyPI", file=sys.stderr)
    try:
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as e:
        raise FetchError(f"could not run pip: {e}") from e
    if result.returncode != 0:
        raise FetchError(
            "pip download failed (is PyPI reachable, and is pip installed for "
            f"{sys.executable}?)\ncommand: {' '.join(command)}\n{result.stdout.strip()}"
        )


def fetch_wheels(cache, modules):
    """Makes sure every wheel of the list is in cache/wheels with the right hash and returns
    {module: wheel path}."""
    wheels_dir = os.path.join(cache, "wheels")
    os.makedirs(wheels_dir, exist_ok=True)
    missing = []
    for _module, package, version, sha256 in modules:
        wheel = find_wheel(wheels_dir, package, version)
        if wheel is not None and sha256_of(wheel) != sha256:
            # A truncated or replaced file: download it again rather than fail for good.
            print(f"fetch.py: {os.path.basename(wheel)} has the wrong hash, downloading it again", file=sys.stderr)
            os.remove(wheel)
            wheel = None
        if wheel is None:
            missing.append((package, version))
    if missing:
        download(wheels_dir, missing)

    wheels, problems = {}, []
    for module, package, version, sha256 in modules:
        wheel = find_wheel(wheels_dir, package, version)
        if wheel is None:
            problems.append(f"pip did not produce a wheel for inmanta-module-{package}=={version}")
            continue
        got = sha256_of(wheel)
        if got != sha256:
            problems.append(f"sha256 mismatch for {os.path.basename(wheel)}: got {got}, modules.tsv says {sha256}")
            continue
        wheels[module] = wheel
    if problems:
        raise FetchError("\n".join(problems))
    return wheels


def wanted(relative):
    """Whether a file of the module package (path relative to `inmanta_plugins/<module>/`)
    belongs in the unpacked module."""
    parts = relative.split("/")
    if "__pycache__" in parts:
        return False
    if parts[0] in TREES and len(parts) > 1:
        return True
    return relative == "setup.cfg" or relative.endswith(".py")


def unpack(wheel, module, dest):
    """Unpacks the module's package from `wheel` into `dest` (which must not exist) and
    returns the .cf files written, relative to `dest`."""
    prefix = f"inmanta_plugins/{module}/"
    cf_files = []
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            relative = name[len(prefix):]
            # The hash pins the archive, but a path that climbs out of `dest` is still refused
            # so that a bad entry in modules.tsv cannot write outside the cache.
            if relative.startswith("/") or ".." in relative.split("/"):
                raise FetchError(f"{os.path.basename(wheel)}: unsafe path {name!r}")
            if not wanted(relative):
                continue
            target = os.path.join(dest, *relative.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with archive.open(name) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            if relative.startswith("model/") and relative.endswith(".cf"):
                cf_files.append(relative)
    if not cf_files:
        raise FetchError(f"{os.path.basename(wheel)} has no model/*.cf files under {prefix}")
    return cf_files


def unpack_all(cache, modules, wheels):
    """Unpacks every module afresh, so that files from an older version cannot linger."""
    cf_files = []
    for module, _package, _version, _sha256 in modules:
        dest = os.path.join(cache, module)
        # Unpack next to the final place and rename, so an interrupted run never leaves a
        # half-written module that looks complete.
        staging = tempfile.mkdtemp(prefix=f".{module}-", dir=cache)
        try:
            written = unpack(wheels[module], module, staging)
            shutil.rmtree(dest, ignore_errors=True)
            os.rename(staging, dest)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        cf_files.extend(f"{module}/{relative}" for relative in written)
    return sorted(cf_files)


def write_file(path, text):
    """Writes through a temporary file and a rename, so readers see the old or the new text."""
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    os.replace(temporary, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", default=os.path.join(HERE, ".cache"), help="output directory (default: %(default)s)")
    parser.add_argument("--list", default=os.path.join(HERE, "modules.tsv"), help="module list (default: %(default)s)")
    args = parser.parse_args()

    with open(args.list, encoding="utf-8") as f:
        list_text = f.read()
    cache = os.path.abspath(args.cache)
    os.makedirs(cache, exist_ok=True)
    # Test runners may start several fetches at once (one per test process): the first one
    # fetches while the others wait, then find the stamp and return.
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return fetch_locked(args, list_text, cache)


def fetch_locked(args, list_text, cache):
    """The work of main(), run while holding the cache's lock."""
    stamp = os.path.join(cache, STAMP)
    if os.path.exists(stamp):
        with open(stamp, encoding="utf-8") as f:
            if f.read() == list_text:
                print(f"fetch.py: {cache} is up to date", file=sys.stderr)
                return 0
        # The list changed: the stamp no longer describes the cache.
        os.remove(stamp)

    try:
        modules = read_list(args.list)
        wheels = fetch_wheels(cache, modules)
        cf_files = unpack_all(cache, modules, wheels)
    except FetchError as e:
        print(f"fetch.py: error: {e}", file=sys.stderr)
        return 1
    write_file(os.path.join(cache, "cf_files.txt"), "".join(f"{p}\n" for p in cf_files))
    # Last, so that the stamp exists only when everything above succeeded.
    write_file(stamp, list_text)
    print(f"fetch.py: {len(modules)} modules, {len(cf_files)} .cf files in {cache}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
