"""A Docker engine reached over TCP with TLS, for the remote-engine tests: a TLS-terminating
relay on 127.0.0.1 in front of the local engine's unix socket that demands a client
certificate signed by a CA made here (``trustme``), as ``dockerd --tlsverify`` does. The
docker SDK's TLS path (``DOCKER_HOST=tcp://...``, ``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``)
runs for real; only the engine behind it is the local one."""
from __future__ import annotations

import os
import socket
import ssl
import threading
from typing import Dict, List


class TLSEngine:
    """The relay; :meth:`close` stops it and cuts its connections.

    Attributes:
        port: its TCP port on 127.0.0.1.
        cert_path: a folder with ``ca.pem``, ``cert.pem``, ``key.pem`` (a client's, as
            ``DOCKER_CERT_PATH`` wants them).
    """

    def __init__(self, folder: str, unix_socket: str = "/var/run/docker.sock") -> None:
        import trustme

        self._unix = unix_socket
        ca = trustme.CA()
        server_cert = ca.issue_cert("127.0.0.1", "localhost")
        client_cert = ca.issue_cert("bridge-client-test-client")
        self.cert_path = os.path.join(folder, "docker-certs")
        os.makedirs(self.cert_path, mode=0o700)
        ca.cert_pem.write_to_path(os.path.join(self.cert_path, "ca.pem"))
        client_cert.cert_chain_pems[0].write_to_path(os.path.join(self.cert_path, "cert.pem"))
        client_cert.private_key_pem.write_to_path(os.path.join(self.cert_path, "key.pem"))
        self._context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_cert.configure_cert(self._context)
        ca.configure_trust(self._context)
        self._context.verify_mode = ssl.CERT_REQUIRED  # no client certificate, no engine
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self.refused = 0
        self.served = 0  # TLS connections that reached the engine
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def environment(self) -> Dict[str, str]:
        """``DOCKER_HOST``, ``DOCKER_TLS_VERIFY`` and ``DOCKER_CERT_PATH`` for this engine."""
        return {"DOCKER_HOST": f"tcp://127.0.0.1:{self.port}", "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": self.cert_path}

    def _accept(self) -> None:
        while True:
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        raw.settimeout(10.0)
        try:
            tls = self._context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            self.refused += 1
            raw.close()
            return
        tls.settimeout(None)
        engine = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            engine.connect(self._unix)
        except OSError:
            tls.close()
            return
        with self._lock:
            self._socks += [tls, engine]
            self.served += 1
        # One OpenSSL connection object must not be read and written by two threads at once:
        # an engine that answers before it has read the whole request (a 404 to an upload of
        # 400 KB into a missing folder) would write while the other pump reads, and the
        # client then saw the connection end mid-request. Each call on ``tls`` holds this lock.
        guard = threading.Lock()
        threading.Thread(target=self._pump, args=(engine, tls, guard), daemon=True).start()
        self._pump(tls, engine, guard)

    @staticmethod
    def _pump(a: socket.socket, b: socket.socket, guard: "threading.Lock") -> None:
        import select

        try:
            while True:
                if isinstance(a, ssl.SSLSocket):
                    if not a.pending():
                        select.select([a], [], [])  # wait outside the lock
                    with guard:
                        data = a.recv(65536)  # a whole record is on its way: no long block
                else:
                    data = a.recv(65536)
                if not data:
                    break
                if isinstance(b, ssl.SSLSocket):
                    with guard:
                        b.sendall(data)
                else:
                    b.sendall(data)
            if isinstance(b, ssl.SSLSocket):
                # The engine ended the stream (an exec's output is over): the client reads the
                # end, and the other pump, blocked reading the client, wakes up.
                b.shutdown(socket.SHUT_RDWR)
            else:
                b.shutdown(socket.SHUT_WR)  # the exec's stdin ends
        except OSError:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def close(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
