#!/usr/bin/env python3
"""gRPC C-core (python3-grpcio) as a client of the rate limit service.

Reads a JSON plan on stdin and writes the outcome as JSON on stdout, so that
the Go test builds the requests and checks the responses with the protobuf
library, and this client only moves bytes: it opens one insecure channel to
plan["target"] and, for each entry of plan["calls"], calls entry["method"]
through channel.unary_unary with no serializers (the request bytes go out
as they are, the response bytes come back as they are), every request of
entry["requests"] (base64) at once as futures on that one channel, with
entry["timeout"] seconds as the deadline when set, entry["metadata"]
([[name, value], ...]) as metadata and entry["compression"] ("gzip",
"deflate") as the call's compression. Each result is {"code": StatusCode name,
"response": base64} or {"code", "details"} on an error, in request order.

With plan["tls"] ({"ca": PEM, and for mTLS "cert" and "key": PEM}) the
channel is a secure one, verifying the server against ca. With
plan["no_wait"] the client does not wait for the channel to be ready before
its calls: a call on a channel that cannot connect (a refused handshake)
fails at once, UNAVAILABLE.

    {"target": "127.0.0.1:9000",
     "calls": [{"name": "rls", "method": "/pkg.Svc/Method",
                "requests": ["base64", ...], "timeout": 5}]}
"""

import base64
import json
import sys

import grpc


def main():
    plan = json.load(sys.stdin)
    out = []
    tls = plan.get("tls")
    if tls:
        creds = grpc.ssl_channel_credentials(
            root_certificates=tls["ca"].encode(),
            private_key=tls["key"].encode() if tls.get("key") else None,
            certificate_chain=tls["cert"].encode() if tls.get("cert") else None,
        )
        channel = grpc.secure_channel(plan["target"], creds)
    else:
        channel = grpc.insecure_channel(plan["target"])
    with channel:
        if not plan.get("no_wait"):
            # A bound on the connection, not a measurement.
            grpc.channel_ready_future(channel).result(timeout=30)
        for entry in plan["calls"]:
            call = channel.unary_unary(entry["method"])
            metadata = [tuple(kv) for kv in entry.get("metadata", [])] or None
            compression = {
                None: None,
                "gzip": grpc.Compression.Gzip,
                "deflate": grpc.Compression.Deflate,
            }[entry.get("compression")]
            futures = [
                call.future(base64.b64decode(r), timeout=entry.get("timeout"), metadata=metadata, compression=compression)
                for r in entry["requests"]
            ]
            results = []
            for f in futures:
                try:
                    resp = f.result()
                    results.append({"code": "OK", "response": base64.b64encode(resp).decode()})
                except grpc.RpcError as e:
                    results.append({"code": e.code().name, "details": e.details() or ""})
            out.append({"name": entry["name"], "results": results})
    json.dump({"calls": out}, sys.stdout)


if __name__ == "__main__":
    main()
