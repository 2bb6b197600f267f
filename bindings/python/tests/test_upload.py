"""The Datadog upload from a Python process reaches a local agent-like HTTP
server: multipart with event.json (family python, runtime cpython) and the
pprof."""
import email.parser
import email.policy
import http.server
import json
import threading

import pprof


def test_datadog_upload(run_py):
    got = []

    class Agent(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, dict(self.headers), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Agent)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_py('''
            import contprof, time
            contprof.start(service="upload-test", env="test",
                           agent_url="http://127.0.0.1:%d", export="datadog")
            def spin():
                end = time.thread_time() + 0.3
                while time.thread_time() < end:
                    pass
            spin()
            contprof.stop()
        ''' % server.server_port)
    finally:
        server.shutdown()
    assert len(got) == 1, got
    path, headers, body = got[0]
    assert path == "/profiling/v1/input"
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + headers["Content-Type"].encode() + b"\r\n\r\n" +
        body)
    parts = {p.get_filename(): p.get_payload(decode=True)
             for p in msg.iter_parts()}
    event = json.loads(parts["event.json"])
    assert event["family"] == "python"
    tags = event["tags_profiler"].split(",")
    assert "language:python" in tags and "runtime:cpython" in tags
    assert "service:upload-test" in tags and "env:test" in tags
    assert any(t.startswith("runtime_version:3.") for t in tags)
    prof = pprof.Profile(parts["profile.pprof"])
    assert prof.total("cpu-time", lambda s: "spin" in s.functions()) > 0.2e9
