#!/bin/sh
# make-certs.sh DIR — a throwaway PKI for the identity example (not for
# production): a CA for the trust domain merchant-prod (the demo catalog's), the server's
# certificate for localhost and 127.0.0.1, and two client certificates
# whose URI SANs are SPIFFE IDs (X.509 SVIDs).
#
#   sh examples/identity/make-certs.sh examples/identity/certs
#
# Files: ca.pem (give it to --client-ca and to the clients' --tls-ca),
# server.pem/server-key.pem (--tls-cert/--tls-key), orders.pem/orders-key.pem
# and notifier.pem/notifier-key.pem (the clients' --tls-cert/--tls-key).
set -eu
dir=${1:-certs}
mkdir -p "$dir"
cd "$dir"
days=30

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=merchant-prod CA" -keyout ca-key.pem -out ca.pem \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

# leaf NAME SAN EKU: a key and a certificate signed by the CA.
leaf() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$1-key.pem" -out "$1.csr" 2>/dev/null
  printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=%s\nsubjectAltName=%s\n' "$3" "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days "$days" \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
  chmod 600 "$1-key.pem"
}

leaf server "DNS:localhost,IP:127.0.0.1,URI:spiffe://merchant-prod/pigeon" serverAuth
leaf orders "URI:spiffe://merchant-prod/ns/orders/sa/orders-api" clientAuth
leaf notifier "URI:spiffe://merchant-prod/ns/notify/sa/notifier-worker" clientAuth
chmod 600 ca-key.pem
echo "certificates in $(pwd)"
