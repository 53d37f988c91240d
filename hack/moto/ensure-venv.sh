#!/usr/bin/env bash
# ensure-venv.sh creates (or reuses) the Python virtualenv holding the pinned
# moto server used by the cloudmap backend's tests, and prints the path of its
# moto_server executable. It is idempotent: when the pinned version is already
# installed it does nothing else.
#
#   VENV     where the virtualenv lives (default: <repo>/.cache/moto-venv)
#   PYTHON   the interpreter to create it with (default: python3)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "${here}/../.." && pwd)"
req="${here}/requirements.txt"
venv="${VENV:-${repo}/.cache/moto-venv}"
python="${PYTHON:-python3}"

want="$(sed -n 's/^moto\[server\]==\([^[:space:]]*\).*/\1/p' "${req}")"
if [[ -z "${want}" ]]; then
	echo "ensure-venv: no moto[server]==VERSION pin in ${req}" >&2
	exit 1
fi

installed() {
	[[ -x "${venv}/bin/moto_server" ]] &&
		[[ "$("${venv}/bin/python" -c 'import importlib.metadata as m; print(m.version("moto"))' 2>/dev/null)" == "${want}" ]]
}

if ! installed; then
	# One installer at a time: parallel test binaries may call this together.
	mkdir -p "$(dirname "${venv}")"
	exec 9>"${venv}.lock"
	flock 9
	if ! installed; then
		echo "ensure-venv: installing moto ${want} into ${venv}" >&2
		if [[ ! -x "${venv}/bin/python" ]]; then
			"${python}" -m venv "${venv}"
		fi
		"${venv}/bin/python" -m pip install --quiet --disable-pip-version-check -r "${req}" >&2
		installed || { echo "ensure-venv: moto ${want} not installed in ${venv}" >&2; exit 1; }
	fi
fi
echo "${venv}/bin/moto_server"
