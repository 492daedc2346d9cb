#!/usr/bin/env bash
# deploy/tls/redis-tls.sh: a throwaway Redis that speaks only TLS, for the TLS integration tests.
#
#   redis-tls.sh start PORT DIR [--mtls] [--server-cert NAME] [--password PW]
#       redis-server on 127.0.0.1:PORT, TLS only (plain port 0), certificates from DIR (made
#       by certs.sh DIR if missing), nothing persisted; pid and log in DIR/redis-PORT.{pid,log}.
#       --mtls               clients must present a certificate signed by DIR/ca.pem
#       --server-cert NAME   serve DIR/NAME.pem / NAME.key (default server; `wronghost` for
#                            hostname-mismatch tests)
#       --password PW        requirepass PW
#       Returns once `redis-cli --tls ... ping` answers PONG (10 s at most).
#   redis-tls.sh stop DIR [PORT]
#       stop the redis-server(s) started in DIR (every DIR/redis-*.pid, or only PORT's) and
#       wait for them to exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)

usage() { sed -n '2,14p' "$0" >&2; exit 2; }
log() { echo "redis-tls: $*" >&2; }

# The pid in FILE if it still names a running redis-server (a stale file may name a reused pid).
live_pid() {
  local pid
  pid=$(cat "$1" 2>/dev/null || true)
  [[ -n $pid ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null || true) == redis-server* ]] && echo "$pid"
  return 0
}

# redis-cli against the TLS port, with the client certificate when mTLS is on.
cli() { # PORT DIR MTLS PASSWORD ARGS...
  local port=$1 dir=$2 mtls=$3 pw=$4; shift 4
  local args=(--tls --cacert "$dir/ca.pem" -h 127.0.0.1 -p "$port")
  [[ $mtls == yes ]] && args+=(--cert "$dir/client.pem" --key "$dir/client.key")
  [[ -n $pw ]] && args+=(-a "$pw" --no-auth-warning)
  redis-cli "${args[@]}" "$@"
}

start() {
  [[ $# -ge 2 ]] || usage
  local port=$1 dir=$2 mtls=no cert=server pw=""
  shift 2
  while [[ $# -gt 0 ]]; do
    case $1 in
      --mtls) mtls=yes; shift ;;
      --server-cert) cert=${2:?--server-cert NAME}; shift 2 ;;
      --password) pw=${2:?--password PW}; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ $port =~ ^[0-9]+$ ]] && ((port > 0 && port < 65536)) || { log "bad port $port"; exit 1; }
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd) # redis resolves relative paths after chdir to --dir
  [[ -f $dir/ca.pem ]] || "$here/certs.sh" "$dir" >/dev/null
  [[ -f $dir/$cert.pem && -f $dir/$cert.key ]] || { log "no $dir/$cert.pem / $cert.key"; exit 1; }

  local pidf=$dir/redis-$port.pid logf=$dir/redis-$port.log
  if [[ -n $(live_pid "$pidf") ]]; then
    log "already running on $port (pid $(live_pid "$pidf")); stop it first"
    exit 1
  fi
  rm -f "$pidf"
  : >"$logf"

  local args=(
    --bind 127.0.0.1 --port 0 --tls-port "$port"
    --tls-cert-file "$dir/$cert.pem" --tls-key-file "$dir/$cert.key"
    --tls-ca-cert-file "$dir/ca.pem" --tls-auth-clients "$mtls"
    --save "" --appendonly no
    --daemonize yes --pidfile "$pidf" --logfile "$logf" --dir "$dir"
  )
  [[ -n $pw ]] && args+=(--requirepass "$pw")
  redis-server "${args[@]}"

  # Readiness through the TLS port itself, so a bad certificate shows up here and not in a test.
  # redis-cli checks the chain but not the host name, so this also passes with --server-cert
  # wronghost.
  local i out=""
  for i in $(seq 1 50); do
    out=$(cli "$port" "$dir" "$mtls" "$pw" ping 2>&1 || true)
    if [[ $out == PONG ]]; then
      log "TLS on 127.0.0.1:$port (cert $cert, mtls $mtls${pw:+, password}) pid $(live_pid "$pidf")"
      return 0
    fi
    sleep 0.2
  done
  log "no PONG on $port after 10 s: ${out:-no answer}"
  tail -20 "$logf" >&2 || true
  stop "$dir" "$port" || true
  exit 1
}

stop() {
  [[ $# -ge 1 ]] || usage
  local dir=$1 port=${2:-} f pid pids=()
  local files=("$dir"/redis-*.pid)
  [[ -n $port ]] && files=("$dir/redis-$port.pid")
  for f in "${files[@]}"; do
    [[ -f $f ]] || continue
    pid=$(live_pid "$f")
    if [[ -n $pid ]]; then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  # SIGTERM exits at once with nothing to save; wait (5 s) then SIGKILL a straggler.
  local i p alive
  for i in $(seq 1 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    [[ $(cat "/proc/$p/comm" 2>/dev/null || true) == redis-server* ]] && kill -9 "$p" 2>/dev/null || true
  done
  for f in "${files[@]}"; do rm -f "$f"; done
  [[ ${#pids[@]} -gt 0 ]] && log "stopped pid(s) ${pids[*]}"
  return 0
}

case ${1:-} in
  start) shift; start "$@" ;;
  stop) shift; stop "$@" ;;
  *) usage ;;
esac
