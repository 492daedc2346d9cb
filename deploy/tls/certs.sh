#!/usr/bin/env bash
# deploy/tls/certs.sh: test certificates for the TLS integration tests, made with the openssl CLI.
#
#   certs.sh DIR
#
# Writes into DIR (created if missing):
#   ca.pem, ca.key               the test CA
#   server.pem, server.key       signed by the CA, SAN DNS:localhost, IP:127.0.0.1
#   client.pem, client.key       client certificate signed by the CA, CN=savepoint-client
#   other-ca.pem, other-ca.key   a second, unrelated CA ("wrong CA" tests)
#   wronghost.pem, wronghost.key signed by the CA, SAN only DNS:not-this-host.example
#                                ("wrong hostname" tests)
# Keys are EC P-256 in PKCS#8 PEM ("BEGIN PRIVATE KEY"), which rustls, Redis and Erlang all read.
# Idempotent: a file that exists is kept (an existing CA keeps signing the missing leaves), so
# a second run changes nothing and running servers keep working.
set -euo pipefail

[[ $# -eq 1 ]] || { sed -n '2,15p' "$0" >&2; exit 2; }
dir=$1
mkdir -p "$dir"
cd "$dir"

days=3650

# genpkey writes PKCS#8 ("BEGIN PRIVATE KEY"); `ecparam -genkey` would write SEC1 with a params
# block in front, which some loaders reject.
key() { [[ -f $1 ]] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

ca() { # NAME CN: a self-signed CA (rustls/webpki want CA:TRUE and keyCertSign on the issuer)
  [[ -f $1.pem ]] && return 0
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days "$days" -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$1.pem"
}

leaf() { # NAME CN EKU SAN...: an end-entity certificate signed by ca.pem
  local name=$1 cn=$2 eku=$3; shift 3
  [[ -f $name.pem ]] && return 0
  key "$name.key"
  local ext
  ext=$(mktemp)
  # v3 extensions: webpki rejects leaves without SAN (CN is not checked), leaves marked CA, and
  # an extendedKeyUsage that lacks the role (serverAuth / clientAuth).
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature"
    echo "extendedKeyUsage=$eku"
    echo "subjectKeyIdentifier=hash"
    echo "authorityKeyIdentifier=keyid"
    [[ $# -gt 0 ]] && (IFS=,; echo "subjectAltName=$*")
  } >"$ext"
  # A random serial instead of a ca.srl file: nothing else to keep in DIR.
  openssl req -new -key "$name.key" -subj "/CN=$cn" |
    openssl x509 -req -CA ca.pem -CAkey ca.key -set_serial "0x$(openssl rand -hex 16)" \
      -sha256 -days "$days" -extfile "$ext" -out "$name.pem" 2>/dev/null
  rm -f "$ext"
}

ca ca "Savepoint test CA"
ca other-ca "Savepoint unrelated test CA"
leaf server localhost serverAuth DNS:localhost IP:127.0.0.1
leaf client savepoint-client clientAuth
leaf wronghost not-this-host.example serverAuth DNS:not-this-host.example

# The machine's RabbitMQ (or a node started by rabbitmq-tls.sh through the packaged wrapper)
# may run as another user than us: let that user's group read the keys and everyone the certs.
chmod 644 ./*.pem
chmod 600 ./*.key
svc=$(ps -o user= -C beam.smp 2>/dev/null | sort -u | head -1 | tr -d ' ' || true)
if [[ -n $svc && $svc != "$(id -un)" ]] && id "$svc" >/dev/null 2>&1; then
  chgrp "$(id -gn "$svc")" ./*.key 2>/dev/null && chmod 640 ./*.key || chmod 644 ./*.key
  chmod o+x . 2>/dev/null || true
fi

for f in ca server client other-ca wronghost; do
  [[ -s $f.pem && -s $f.key ]] || { echo "certs.sh: $dir/$f.pem or .key missing" >&2; exit 1; }
done
echo "$dir"
