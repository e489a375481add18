#!/usr/bin/env bash
# One entry point that does its own set-up: ./run.sh demo | test | bench | lint | contract-latest
# Creates .venv with Python 3.11, installs the project with its extras, then runs the command.
set -euo pipefail
cd "$(dirname "$0")"

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PY="$candidate"; break; fi
  done
fi
[ -n "$PY" ] || { echo "run.sh: Python 3.11 not found (set PYTHON=/path/to/python3.11)" >&2; exit 2; }
command -v java >/dev/null 2>&1 || echo "run.sh: warning: java not found on PATH; Spark needs Java 17" >&2

# An editable install (hatchling's: a .pth line puts the checkout on sys.path), so PySpark's lookup of top-level
# pyspark_* modules finds pyspark_s3parquet, which registers the source automatically. The install line is part
# of the stamp, so changing it reinstalls; so does a change to the JVM scan (hatch_build.py builds its jar then).
INSTALL=(-e ".[fsspec,spark,test,bench,docs]")
stamp=.venv/.installed-$( (cat pyproject.toml hatch_build.py $(find jvm -type f | sort); echo "${INSTALL[*]}") | cksum | cut -d' ' -f1)
if [ ! -f "$stamp" ]; then
  "$PY" -m venv --clear .venv  # a fresh venv: nothing left from an earlier install line
  rm -rf ./*.egg-info  # metadata an earlier setuptools install left in the checkout (on sys.path: it would shadow)
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q "${INSTALL[@]}"
  rm -f .venv/.installed-*
  touch "$stamp"
fi
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$PWD/.venv/bin/python"

# Quietly install Debian packages (root + apt only), with at most one `apt-get update` per run.
apt_install() {
  [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 || return 1
  if [ -z "${APT_UPDATED:-}" ]; then apt-get update -qq || return 1; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# Kernel-level blackhole tests need ip + iptables when running as root; elsewhere they skip with the reason.
ensure_netns_tools() {
  if [ "$(id -u)" = "0" ] && ! command -v iptables >/dev/null 2>&1; then
    apt_install iptables iproute2 >/dev/null 2>&1 \
      || echo "run.sh: could not install iptables; blackhole tests will skip" >&2
  fi
}

# The store conformance suite runs on a throwaway Ceph RGW from Debian's packages when running as root (measured on
# a clean machine: 64 packages, 68.8 MB downloaded, ~63 s); elsewhere its RGW tests skip with the reason.
ensure_rgw_packages() {
  local cmd
  for cmd in ceph-mon ceph-osd radosgw ceph radosgw-admin monmaptool ceph-authtool; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
      if [ "$(id -u)" = "0" ]; then
        apt_install --no-install-recommends ceph-mon ceph-osd radosgw ceph-common >/dev/null 2>&1 \
          || echo "run.sh: could not install Ceph RGW; its conformance tests will skip" >&2
      fi
      return 0
    fi
  done
}

# s3rver (npm), the conformance suite's second real store, goes into .venv/s3rver where npm is installed (measured:
# 116 packages, 14 MB, 5-14 s); elsewhere its tests skip with the reason.
ensure_s3rver() {
  [ -f .venv/s3rver/node_modules/s3rver/package.json ] && return 0
  command -v npm >/dev/null 2>&1 || return 0
  npm install --prefix .venv/s3rver --no-audit --no-fund --silent s3rver@3.7.1 >/dev/null 2>&1 \
    || echo "run.sh: could not install s3rver; its conformance tests will skip" >&2
}

# OpenStack Swift with s3api, the conformance suite's store without conditional writes, from Debian's packages when
# running as root (63 packages); elsewhere its tests skip with the reason. The packages' services are kept from
# starting during the install (a policy-rc.d, unless the machine has one): the suite starts its own node.
ensure_swift_packages() {
  local cmd blocker=""
  for cmd in swift-proxy-server swift-account-server swift-container-server swift-object-server memcached; do
    if ! command -v "$cmd" >/dev/null 2>&1; then
      if [ "$(id -u)" = "0" ]; then
        if [ ! -e /usr/sbin/policy-rc.d ]; then
          blocker=/usr/sbin/policy-rc.d
          printf '#!/bin/sh\nexit 101\n' >"$blocker" && chmod +x "$blocker"
        fi
        apt_install --no-install-recommends swift swift-proxy swift-object swift-container swift-account \
          python3-swift memcached >/dev/null 2>&1 \
          || echo "run.sh: could not install Swift; its conformance tests will skip" >&2
        [ -z "$blocker" ] || rm -f "$blocker"
      fi
      return 0
    fi
  done
}

# LocalStack's S3, the conformance suite's store with conditional create and replace but no conditional DELETE,
# needs Python 3.13 (pyenv's, or python3.13 on PATH) and these pins: a venv of its own, .venv/localstack, made once
# (measured: 184 MB, 10-65 s from the machine's wheel cache); elsewhere its tests skip with the reason.
LOCALSTACK=("localstack-core[base-runtime]==2026.3.0" "cbor2<6" "cryptography<44" "pyopenssl<24.3" "service-identity<25")
ensure_localstack() {
  local stamp py="" candidate
  stamp=.venv/localstack/.installed-$(echo "${LOCALSTACK[*]}" | cksum | cut -d' ' -f1)
  [ -f "$stamp" ] && return 0
  if command -v pyenv >/dev/null 2>&1; then
    for candidate in "$(pyenv root)"/versions/3.13.*/bin/python3.13; do
      [ -x "$candidate" ] && py="$candidate"
    done
  fi
  if [ -z "$py" ] && command -v python3.13 >/dev/null 2>&1 && python3.13 -c "" >/dev/null 2>&1; then
    py=python3.13
  fi
  [ -n "$py" ] || { echo "run.sh: no Python 3.13 found; LocalStack's conformance tests will skip" >&2; return 0; }
  if "$py" -m venv --clear .venv/localstack >/dev/null 2>&1 \
    && .venv/localstack/bin/python -m pip install -q "${LOCALSTACK[@]}" >/dev/null 2>&1; then
    touch "$stamp"
  else
    rm -rf .venv/localstack
    echo "run.sh: could not install LocalStack; its conformance tests will skip" >&2
  fi
}

cmd="${1:-test}"
shift || true
case "$cmd" in
  test)
    ensure_netns_tools
    ensure_rgw_packages
    ensure_s3rver
    ensure_swift_packages
    ensure_localstack
    .venv/bin/ruff check .
    .venv/bin/ruff format --check .
    # The suite waits on timers, servers and JVMs far more than it computes (a serial run: 33 min wall, 15 min CPU),
    # so it runs on PYTEST_WORKERS workers (default 3), a test file per worker at a time (tests/conftest.py). `-n 0`
    # or `-p no:xdist` among the arguments (or PYTEST_WORKERS=0) runs it serially.
    parallel=(-n "${PYTEST_WORKERS:-3}" --dist loadfile)
    for arg in "$@"; do
      case "$arg" in -n | -n* | --numprocesses* | --dist* | no:xdist | -pno:xdist) parallel=() ;; esac
    done
    exec .venv/bin/python -m pytest ${parallel[@]+"${parallel[@]}"} "$@"
    ;;
  demo)
    exec .venv/bin/python -m examples.demo "$@"
    ;;
  bench)
    exec .venv/bin/python -m benchmarks.run "$@"
    ;;
  lint)
    .venv/bin/ruff check . && exec .venv/bin/ruff format --check .
    ;;
  contract-latest)
    # The contract with aiohttp's, s3fs's and fsspec's internals, against their newest releases (ignoring the
    # upper bounds in pyproject.toml), in a venv of its own: run it before raising a bound.
    rm -rf .venv-latest
    "$PY" -m venv .venv-latest
    .venv-latest/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv-latest/bin/python -m pip install -q --upgrade aiohttp s3fs fsspec aiobotocore botocore tenacity pyarrow \
      numpy "moto[server]" boto3 pytest pytest-timeout pytest-asyncio
    .venv-latest/bin/python -m pip install -q --no-deps -e .
    .venv-latest/bin/python -m pip list 2>/dev/null | grep -iE "^(aiohttp|s3fs|fsspec|aiobotocore) "
    exec .venv-latest/bin/python -m pytest tests/test_contract_internals.py "$@"
    ;;
  *)
    echo "usage: ./run.sh demo|test|bench|lint|contract-latest [args...]" >&2
    exit 2
    ;;
esac
