"""Seeds a local control plane fast: many objects created side by side over keep-alive
connections, then their statuses, as kubelets and controllers would write them.

    python3 seed.py RUN_DIR OBJECTS.jsonl

RUN_DIR is the control plane's directory (kubeconfig and pki/ from tests/cluster/up.sh);
OBJECTS.jsonl holds one object a line. Used by live_bench, where `kubectl create` would take
most of an hour for 60,000 objects.
"""

import http.client
import json
import os
import queue
import re
import ssl
import sys
import threading

WORKERS = 32


def collection(obj):
    kind, ns = obj["kind"], obj["metadata"].get("namespace")
    group = obj["apiVersion"]
    base = "/api/v1" if group == "v1" else "/apis/" + group
    plural = kind.lower() + "s"
    return base + (f"/namespaces/{ns}" if ns else "") + "/" + plural


def main():
    run_dir, objects_path = sys.argv[1], sys.argv[2]
    server = re.search(r"server: https://([0-9.]+):(\d+)", open(os.path.join(run_dir, "kubeconfig")).read())
    host, port = server.group(1), int(server.group(2))
    context = ssl.create_default_context(cafile=os.path.join(run_dir, "pki/ca.crt"))
    context.load_cert_chain(os.path.join(run_dir, "pki/admin.crt"), os.path.join(run_dir, "pki/admin.key"))
    objects = [json.loads(line) for line in open(objects_path) if line.strip()]
    namespaces = sorted({o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")})
    failures = []

    def run(requests):
        work = queue.Queue()
        for r in requests:
            work.put(r)

        def worker():
            conn = http.client.HTTPSConnection(host, port, context=context)
            while True:
                try:
                    method, path, body, content_type = work.get_nowait()
                except queue.Empty:
                    return
                conn.request(method, path, body=json.dumps(body), headers={"Content-Type": content_type})
                answer = conn.getresponse()
                text = answer.read()
                if answer.status >= 300 and answer.status != 409:
                    failures.append(f"{method} {path}: {answer.status} {text[:300]!r}")

        threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if failures:
            sys.exit("\n".join(failures[:10]))

    json_type, merge = "application/json", "application/merge-patch+json"
    run([("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}, json_type)
         for n in namespaces])
    run([("POST", collection(o), o, json_type) for o in objects])
    # The API server taints every new Node not-ready until the node controller (not run here)
    # sees it Ready; pods and replicas get the status their kubelet and controller would write.
    patches = []
    for o in objects:
        path = collection(o) + "/" + o["metadata"]["name"]
        if o["kind"] == "Node":
            patches.append(("PATCH", path, {"spec": {"taints": o.get("spec", {}).get("taints")}}, merge))
        elif "status" in o:
            patches.append(("PATCH", path + "/status", {"status": o["status"]}, merge))
    run(patches)


if __name__ == "__main__":
    main()
