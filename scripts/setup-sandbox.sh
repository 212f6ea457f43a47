#!/usr/bin/env bash
#! Makes sure code rewards have their sandbox: installs bubblewrap (and Debian's python3, the
#! interpreter sandboxed programs run with) through apt-get when either is missing and this
#! runs as root; otherwise says what fulcrum will do instead. Quick and silent when both are
#! there; never fails the command that calls it (README's two commands do).
#! FULCRUM_BWRAP names another bwrap binary to check; FULCRUM_SKIP_SANDBOX_SETUP=1 skips this.
set -uo pipefail
[[ ${FULCRUM_SKIP_SANDBOX_SETUP:-0} == 1 ]] && exit 0
bwrap=${FULCRUM_BWRAP:-/usr/bin/bwrap}
missing=()
[[ -x $bwrap ]] || missing+=(bubblewrap)
[[ -x /usr/bin/python3 ]] || missing+=(python3)
(( ${#missing[@]} == 0 )) && exit 0

if [[ $bwrap != /usr/bin/bwrap && ! -x $bwrap ]]; then
    echo "setup-sandbox: FULCRUM_BWRAP=$bwrap is not an executable; the package would not put it there" >&2
elif [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "setup-sandbox: installing ${missing[*]} with apt-get (once)" >&2
    if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } >/dev/null 2>&1 \
        && [[ -x /usr/bin/python3 ]]; then
        echo "setup-sandbox: ${missing[*]} installed" >&2
        exit 0
    fi
    echo "setup-sandbox: apt-get could not install ${missing[*]}" >&2
else
    echo "setup-sandbox: ${missing[*]} not installed, and this is not root with apt-get" >&2
fi
cat >&2 <<'MSG'
setup-sandbox: without bubblewrap, code rewards use fulcrum's built-in sandbox: the
  `namespaces` mode where the kernel allows user namespaces (or runs as root), else the
  `landlock` mode (Landlock + seccomp, no namespaces). Where neither works, code rewards are
  refused with an error that says so; math and exact-match rewards are not affected.
  To install it: `sudo apt-get install -y bubblewrap python3` (Debian/Ubuntu).
  Programs run with Debian's /usr/bin/python3 in every mode.
MSG
exit 0
