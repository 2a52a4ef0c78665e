"""git over HTTPS as GitHub serves it: `git http-backend` (git's own smart-HTTP CGI) behind TLS on
loopback, with GitHub's installation-token authentication.

URLs are `https://127.0.0.1:PORT/<owner>/<name>.git`. A request must carry HTTP Basic credentials
`x-access-token:<installation token>` (as GitHub documents for Apps): none or a bad token is 401
(with a `WWW-Authenticate` challenge, as git expects), a token whose installation lacks the
repository is 404 ("Repository not found"), and one whose installation may not read (fetch) or write
(push) contents is 403. The certificate is self-signed per server; clients trust it through
`GIT_SSL_CAINFO=<ca_file>`, so the bot's production code keeps sending tokens over HTTPS only.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import shutil
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from flask import Flask, Response, request
from werkzeug.serving import make_server

from .github_rules import Refusal

# (token, repository full name, service "upload-pack" | "receive-pack") -> None when allowed
Authorize = Callable[[str | None, str, str], Refusal | None]
Resolve = Callable[[str], str | None]  # full name -> bare git directory


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files in `directory`)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "atrex test git")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "git-cert.pem", directory / "git-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def basic_token(header: str) -> str | None:
    """The token of `Authorization: Basic base64(x-access-token:TOKEN)`, else None."""
    if not header.startswith("Basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:]).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return password if user == "x-access-token" and password else None


class GitHttpServer:
    def __init__(self, resolve: Resolve, authorize: Authorize):
        self.resolve, self.authorize = resolve, authorize
        self._dir = Path(tempfile.mkdtemp(prefix="atrex-fake-git-"))
        self.ca_file, key_file = self_signed(self._dir)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, key_file)
        # (repository, service, status, the token it presented or None)
        self.log: list[tuple[str, str, int, str | None]] = []
        self._server = make_server("127.0.0.1", 0, self._app(), threaded=True,
                                   ssl_context=context)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    @property
    def root(self) -> str:
        return f"https://127.0.0.1:{self._server.server_port}"

    def url(self, full_name: str) -> str:
        return f"{self.root}/{full_name}.git"

    def stop(self) -> None:
        self._server.shutdown()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _app(self) -> Flask:
        app = Flask("github-fake-git")
        app.add_url_rule("/<owner>/<name>.git/<path:rest>", "git", self._serve,
                         methods=["GET", "POST"])
        return app

    def _serve(self, owner: str, name: str, rest: str) -> Response:
        full_name = f"{owner}/{name}"
        service = request.args.get("service", rest.rsplit("/", 1)[-1]).removeprefix("git-")
        token = basic_token(request.headers.get("Authorization", ""))
        if service not in ("upload-pack", "receive-pack"):
            return self._answer(full_name, service, token,
                                Response("dumb HTTP is not served\n", 403))
        git_dir = self.resolve(full_name)
        if git_dir is None:
            refusal: Refusal | None = Refusal(404, "Repository not found.")
        else:
            refusal = self.authorize(token, full_name, service)
        if refusal is not None:
            response = Response(f"remote: {refusal.message}\n", refusal.status)
            if refusal.status == 401:
                response.headers["WWW-Authenticate"] = 'Basic realm="GitHub"'
            return self._answer(full_name, service, token, response)
        return self._answer(full_name, service, token, self._cgi(git_dir, rest))

    def _answer(self, full_name: str, service: str, token: str | None,
                response: Response) -> Response:
        self.log.append((full_name, service, response.status_code, token))
        return response

    def _cgi(self, git_dir: str, rest: str) -> Response:
        """Run `git http-backend` for this request (CGI: environment in, headers + body out)."""
        root, base = os.path.split(os.path.abspath(git_dir))
        body = request.get_data()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_PROJECT_ROOT": root,
               "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": f"/{base}/{rest}",
               "REQUEST_METHOD": request.method, "QUERY_STRING": request.query_string.decode(),
               "CONTENT_TYPE": request.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "x-access-token",
               "REMOTE_ADDR": request.remote_addr or "127.0.0.1",
               "GIT_HTTP_MAX_REQUEST_BUFFER": "100M"}
        for header, variable in (("Content-Encoding", "HTTP_CONTENT_ENCODING"),
                                 ("Git-Protocol", "GIT_PROTOCOL")):
            if request.headers.get(header):
                env[variable] = request.headers[header]
        proc = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True)
        head, sep, payload = proc.stdout.partition(b"\r\n\r\n")
        if not sep:
            head, _, payload = proc.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        if proc.returncode != 0 and status == 200:
            status = 500
        return Response(payload, status, headers=headers)
