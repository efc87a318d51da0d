"""Test helpers of the export package: a tiny model with its vocabulary, and local servers.

`RestServer` and `GrpcServer` stand in for TF Serving (whose binary is not available here):
they answer `/v1/models/NAME:predict` (JSON, columnar `inputs`/`outputs`) and
`PredictionService.Predict` with a SavedModel loaded in this process, on 127.0.0.1 only, with a
bounded number and size of requests.
"""

import contextlib
import functools
import http.server
import io
import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import kernels

from psmm_tf.export.clients import ServingError

WORDS = ["<unk>", "<eos>", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "house",
         "and", "of", "in", "it", "was", "big", "red", "small", "tree", "bird", "saw", "his"]


def run_export_main(argv):
    """Runs `psmm-export` with `argv` in this process; returns `(exit code, stdout, stderr)`."""
    from absl import flags

    from psmm_tf.export import export_saved_model

    flags.FLAGS.unparse_flags()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            export_saved_model.main(["psmm-export"] + argv)
            code = 0
        except SystemExit as exit_:
            code = 0 if exit_.code is None else exit_.code
    return code, out.getvalue(), err.getvalue()


def run_main(argv):
    """Runs `psmm-export` in this process; returns its stdout (fails on a non-zero exit)."""
    code, stdout, _ = run_export_main(argv)
    if code != 0:
        raise AssertionError(f"psmm-export exited with {code}")
    return stdout


FORBIDDEN_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc", "XlaLaunch", "_XlaCompile",
                 "_XlaRun", "XlaCallModule", "_XlaMerge"}
FORBIDDEN_PREFIXES = ("Cudnn", "Xla", "_Xla")
XLA_ATTRIBUTES = ("_XlaMustCompile", "_XlaCompile", "_XlaScope")


def servability_problems(export_dir):
    """Ops and attributes of a SavedModel that TF Serving on a CPU cannot run, as strings.

    Walks the graph and every function of its library: op types that are forbidden or have no
    CPU kernel, and nodes or functions marked for XLA compilation.
    """
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    graph = saved_model.meta_graphs[0].graph_def
    functions = {f.signature.name for f in graph.library.function}
    nodes = [("graph", node) for node in graph.node]
    problems = []
    for function in graph.library.function:
        nodes += [(function.signature.name, node) for node in function.node_def]
        for name in XLA_ATTRIBUTES:
            if name in function.attr and function.attr[name].b:
                problems.append(f"function {function.signature.name} has {name}=True")
    cpu_kernels = {}
    for where, node in nodes:
        if node.op in FORBIDDEN_OPS or node.op.startswith(FORBIDDEN_PREFIXES):
            problems.append(f"{where}: forbidden op {node.op} ({node.name})")
        for name in XLA_ATTRIBUTES:
            if name in node.attr and node.attr[name].b:
                problems.append(f"{where}: node {node.name} has {name}=True")
        if node.op in functions:  # a direct call of a library function
            continue
        if node.op not in cpu_kernels:
            registered = kernels.get_registered_kernels_for_op(node.op).kernel
            # DEFAULT kernels (NoOp, Assert, ...) run on every device, the CPU included.
            cpu_kernels[node.op] = any(k.device_type in ("CPU", "DEFAULT") for k in registered)
        if not cpu_kernels[node.op]:
            problems.append(f"{where}: op {node.op} has no CPU kernel ({node.name})")
    return problems


@contextlib.contextmanager
def tf1_session_signatures(export_dir):
    """TF Serving's path to an export: the TF1 loader, a graph and a session.

    Yields `run(signature_name, feeds) -> dict of outputs`, which feeds and fetches tensors by the
    names the signature declares (as TF Serving does), not through Python functions.
    """
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        meta = tf.compat.v1.saved_model.load(session, ["serve"], export_dir)

        def run(name, feeds):
            signature = meta.signature_def[name]
            return session.run({k: v.name for k, v in signature.outputs.items()},
                               {signature.inputs[k].name: v for k, v in feeds.items()})

        yield run


def write_vocabulary(path, words=WORDS):
    """Writes a vocabulary file (one token per line) and returns its path."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(word + "\n" for word in words))
    return path


def tiny_model(vocab_size=None, kind="psmm", seed=3, **model_fields):
    """The `tiny` preset's model (window 8, 2x16) with random weights; returns (model, config).

    `model_fields` set other `ModelConfig` fields; a model with character inputs is given
    `WORDS` as its vocabulary."""
    from psmm_tf.configs import get_preset
    from psmm_tf.models import build_model

    preset = get_preset("tiny")
    vocab_size = len(WORDS) if vocab_size is None else vocab_size
    config = preset.replace(model={"vocab_size": vocab_size, "kind": kind, "seed": seed,
                                   **model_fields})
    model = build_model(config.model)
    if config.model.input_embedding == "chars":
        model.set_vocabulary(WORDS)
    # Random but not symmetric: a larger sentinel spread makes the gate vary between tokens.
    for variable in model.variables:
        if "sentinel" in variable.path:
            variable.assign(tf.random.stateless_normal(variable.shape, [seed, 1]))
    return model, config


@functools.lru_cache(maxsize=None)
def shared_export():
    """One export of `tiny_model()` per test run (`psmm_tf.testing.made_once`):
    `(model, vocabulary_file, export_dir)`, the model built again in each process (the same
    seeded weights).

    Tests must not change the model or the files.
    """
    from psmm_tf import testing
    from psmm_tf.export.export_saved_model import export

    model, _ = tiny_model()

    def make(folder):
        folder.mkdir()
        export_dir = export(model, write_vocabulary(str(folder / "vocab.txt")),
                            str(folder / "base"))
        (folder / "export_dir.txt").write_text(export_dir)

    folder = testing.made_once("shared_export", make)
    return model, str(folder / "vocab.txt"), (folder / "export_dir.txt").read_text()


class _Handler(http.server.BaseHTTPRequestHandler):
    max_body = 8 << 20

    def do_POST(self):  # noqa: N802 (http.server's naming)
        server = self.server
        prefix = f"/v1/models/{server.model_name}"
        if not (self.path.startswith(prefix) and self.path.endswith(":predict")):
            return self._reply(404, {"error": f"Unknown path {self.path}"})
        length = int(self.headers.get("Content-Length", 0))
        if length > self.max_body:
            return self._reply(413, {"error": "Request too large."})
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
            signature = body.get("signature_name", "serving_default")
            outputs = server.client.predict(signature, body["inputs"])
        except (ServingError, KeyError, ValueError, TypeError) as err:
            return self._reply(400, {"error": str(err)})
        server.requests += 1
        self._reply(200, {"outputs": {k: np.asarray(v).tolist() for k, v in outputs.items()}})

    def _reply(self, code, payload):
        data = json.dumps(payload).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class RawHttpServer:
    """Answers every connection on 127.0.0.1 with the same raw bytes (a broken server), for at
    most `max_requests` connections. Use as a context manager; `url` is its address."""

    def __init__(self, reply, max_requests=8):
        self.reply, self.max_requests = reply, max_requests
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)  # polls: a blocked accept would outlive close()
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        served = 0
        deadline = time.monotonic() + 120  # bounded in time as in count
        while served < self.max_requests and not self.stopped.is_set():
            if time.monotonic() > deadline:
                return
            try:
                connection, _ = self.socket.accept()
            except TimeoutError:
                continue
            except OSError:  # closed
                return
            served += 1
            with connection:
                connection.settimeout(10)
                try:
                    _read_request(connection)  # all of it: unread bytes would reset the close
                    connection.sendall(self.reply)
                    connection.shutdown(socket.SHUT_WR)
                    while connection.recv(1 << 16):  # until the client closes
                        pass
                except OSError:
                    pass

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join(timeout=30)
        self.socket.close()


def _read_request(connection):
    """Reads one HTTP request (headers, then Content-Length bytes of body) from `connection`."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = connection.recv(1 << 16)
        if not chunk:
            return
        body += chunk


class RestServer:
    """A TF Serving-like REST endpoint on 127.0.0.1 for at most `max_requests` requests.

    Use as a context manager; `url` is e.g. "http://127.0.0.1:43121".
    """

    def __init__(self, client, model_name="psmm", max_requests=100):
        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.timeout = 30
        self.httpd.client, self.httpd.model_name, self.httpd.requests = client, model_name, 0
        self.max_requests = max_requests
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self):
        for _ in range(self.max_requests):
            self.httpd.handle_request()
            if self.stopping:
                break

    def __enter__(self):
        self.stopping = False
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopping = True
        if self.thread.is_alive():  # wake handle_request() with one last request
            try:
                import urllib.request
                urllib.request.urlopen(self.url, timeout=5)
            except Exception:  # noqa: BLE001 (404 or a closed socket both end the loop)
                pass
        self.thread.join(timeout=10)
        self.httpd.server_close()


class GrpcServer:
    """`PredictionService.Predict` on 127.0.0.1 answered by `client` (a `LocalClient`)."""

    def __init__(self, client, model_name="psmm"):
        from concurrent import futures

        import grpc
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
            def Predict(self, request, context):  # noqa: N802 (gRPC's naming)
                if request.model_spec.name != model_name:
                    context.abort(grpc.StatusCode.NOT_FOUND, f"No model {request.model_spec.name}")
                inputs = {k: tf.make_ndarray(v) for k, v in request.inputs.items()}
                try:
                    outputs = client.predict(request.model_spec.signature_name
                                             or "serving_default", inputs)
                except ServingError as err:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(err))
                response = predict_pb2.PredictResponse()
                for name, value in outputs.items():
                    response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
                return response

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                                  options=[("grpc.max_receive_message_length", 8 << 20)])
        prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(),
                                                                            self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.target = f"127.0.0.1:{self.port}"

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(grace=None).wait(10)


_FRESH_PROCESS_SCRIPT = """
import os, pickle, sys
sys.modules["psmm_tf"] = None  # any import of the package now fails
sys.modules["export"] = None
sys.path = [p for p in sys.path if p and os.path.abspath(p) != {repo!r}]
import tensorflow as tf
with open({requests!r}, "rb") as f:
    requests = pickle.load(f)
results, loaded = {{}}, {{}}
for key, export_dir, signature, inputs, state_from in requests:
    if export_dir not in loaded:
        loaded[export_dir] = tf.saved_model.load(export_dir)
    function = loaded[export_dir].signatures[signature]
    _, specs = function.structured_input_signature
    if state_from is not None:
        inputs = {{**{{n: results[state_from][n] for n in specs if n not in inputs}}, **inputs}}
    outputs = function(**{{n: tf.constant(v, specs[n].dtype) for n, v in inputs.items()}})
    results[key] = {{n: v.numpy() for n, v in outputs.items()}}
try:
    import psmm_tf  # noqa: F401
    results["psmm_tf_importable"] = True
except ImportError:
    results["psmm_tf_importable"] = False
with open({outputs!r}, "wb") as f:
    pickle.dump(results, f)
"""


def signatures_in_fresh_process(requests, folder, timeout=300):
    """Runs signature calls in a new Python process in which psmm_tf and export are absent.

    Args:
        requests: list of `(key, export_dir, signature_name, inputs, state_from)`: `inputs` a
            dict of NumPy arrays or lists; `state_from` None or the key of an earlier request
            whose outputs fill the inputs not given (the carried state of a stream).
        folder: str. Where the request and result files go.

    Returns:
        `{key: {output name: NumPy array}}`, and `"psmm_tf_importable"`: bool (False).
    """
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = {name: os.path.join(folder, f"fresh_{name}.pkl") for name in ("requests", "outputs")}
    with open(paths["requests"], "wb") as f:
        pickle.dump(requests, f)
    script = _FRESH_PROCESS_SCRIPT.format(repo=repo, **paths)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    result = subprocess.run([sys.executable, "-c", script], cwd=folder,
                            env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise AssertionError(f"The fresh process failed:\n{result.stderr[-3000:]}")
    with open(paths["outputs"], "rb") as f:
        return pickle.load(f)


def file_listing(path):
    """Every file below `path`, relative to it, sorted."""
    found = []
    for root, _, files in os.walk(path):
        found += [os.path.relpath(os.path.join(root, f), path) for f in files]
    return sorted(found)
