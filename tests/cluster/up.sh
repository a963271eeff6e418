#!/usr/bin/env bash
# A local control plane for the end-to-end tests: etcd and kube-apiserver on 127.0.0.1 only,
# with a generated CA, serving certificates, an admin client certificate and kubeconfig,
# service-account signing keys and RBAC. No kubelet and no controllers: tests create Nodes and
# bound pods themselves and play the OME controller where they need one.
#
#   tests/cluster/up.sh DIR     start (binaries from tests/cluster/build.sh), wait until ready
#   tests/cluster/down.sh DIR   stop, keep the logs
#
# DIR receives the PKI, kubeconfig, data, logs (etcd.log, kube-apiserver.log) and pids.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: up.sh DIR}"
mkdir -p "$dir/pki" "$dir/logs"
dir="$(cd "$dir" && pwd)"
bin="$("$here/build.sh")"
ln -sfn "$bin" "$dir/bin" # the harness puts it on PATH (kubectl, when the machine has none)
export PATH="$PATH:$bin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
etcd_port="$(free_port)"
peer_port="$(free_port)"
api_port="$(free_port)"

pki="$dir/pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj "/CN=alfred-e2e-ca" -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
sign() { # name subject extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "$2" \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" 2>/dev/null
  printf '%b' "$3" > "$pki/$1.ext"
  openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" 2>/dev/null
  rm -f "$pki/$1.csr" "$pki/$1.ext"
}
sign apiserver "/CN=kube-apiserver" \
  "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth"
sign admin "/O=system:masters/CN=alfred-e2e-admin" "extendedKeyUsage=clientAuth"
sign viewer "/CN=alfred-e2e-viewer" "extendedKeyUsage=clientAuth" # no rights until bound
sign webhook "/CN=alfred-webhook" "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"
openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null

"$bin/etcd" --name e2e --data-dir "$dir/etcd" --unsafe-no-fsync \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "e2e=http://127.0.0.1:$peer_port" --log-level warn \
  >"$dir/logs/etcd.log" 2>&1 &
echo $! > "$dir/etcd.pid"

# Every request in the audit log (tests count the API calls of a pass).
cat > "$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
EOF

# ServiceAccount admission is off: without a controller manager no default ServiceAccount
# would ever exist, and tests create pods directly.
"$bin/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --service-account-issuer https://kubernetes.default.svc \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --authorization-mode RBAC \
  --service-cluster-ip-range 10.0.0.0/24 \
  --disable-admission-plugins ServiceAccount \
  --enable-priority-and-fairness=false --profiling=false \
  --endpoint-reconciler-type none \
  --audit-policy-file "$dir/audit-policy.yaml" --audit-log-path "$dir/logs/audit.log" \
  --audit-log-format json --audit-log-mode blocking \
  >"$dir/logs/kube-apiserver.log" 2>&1 &
echo $! > "$dir/kube-apiserver.pid"

write_kubeconfig() { # file user
cat > "$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: e2e
  context: {cluster: e2e, user: $2}
current-context: e2e
EOF
}
kubeconfig="$dir/kubeconfig"
write_kubeconfig "$kubeconfig" admin
write_kubeconfig "$dir/kubeconfig-viewer" viewer

for _ in $(seq 1 120); do
  if kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    echo "$kubeconfig"
    exit 0
  fi
  for p in etcd kube-apiserver; do
    if ! kill -0 "$(cat "$dir/$p.pid")" 2>/dev/null; then
      attempt="${ALFRED_UP_ATTEMPT:-1}"
      if grep -q "address already in use" "$dir/logs/$p.log" && [ "$attempt" -lt 3 ]; then
        # Another process took a chosen port before it was bound: start again on new ones.
        echo "$p lost its port to another process (attempt $attempt); starting again" >&2
        kill "$(cat "$dir/etcd.pid")" "$(cat "$dir/kube-apiserver.pid")" 2>/dev/null || true
        sleep 1
        rm -rf "$dir/etcd"
        ALFRED_UP_ATTEMPT=$((attempt + 1)) exec "$0" "$dir"
      fi
      echo "$p exited; its log:" >&2
      tail -30 "$dir/logs/$p.log" >&2
      exit 1
    fi
  done
  sleep 0.5
done
echo "kube-apiserver not ready after 60 s; see $dir/logs" >&2
exit 1
