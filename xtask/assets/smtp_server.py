#!/usr/bin/python3
"""replaysafe's test SMTP server: aiosmtpd writing a Maildir, with optional STARTTLS and AUTH.

usage: /usr/bin/python3 smtp_server.py MAILDIR --port PORT
       [--tls-cert CERT --tls-key KEY --require-starttls] [--user USER --password-file FILE]
Binds 127.0.0.1 only. Prints READY once listening; stops on SIGTERM or SIGINT.
"""
import argparse
import signal
import ssl
import threading

from aiosmtpd.controller import Controller
from aiosmtpd.handlers import Mailbox
from aiosmtpd.smtp import AuthResult, LoginPassword

parser = argparse.ArgumentParser()
parser.add_argument("maildir")
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--tls-cert")
parser.add_argument("--tls-key")
parser.add_argument("--require-starttls", action="store_true")
parser.add_argument("--user")
parser.add_argument("--password-file")
args = parser.parse_args()

options = {}
if args.tls_cert:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(args.tls_cert, args.tls_key)
    options.update(tls_context=context, require_starttls=args.require_starttls)
if args.user:
    with open(args.password_file, "rb") as handle:
        expected_password = handle.read().strip()

    def authenticate(server, session, envelope, mechanism, data):
        accepted = (
            isinstance(data, LoginPassword)
            and data.login == args.user.encode()
            and data.password == expected_password
        )
        # handled=False lets the server answer 535 on failure.
        return AuthResult(success=accepted, handled=False)

    options.update(
        authenticator=authenticate,
        auth_require_tls=bool(args.tls_cert),
        auth_required=True,
        auth_exclude_mechanism=[],
    )

controller = Controller(Mailbox(args.maildir), hostname="127.0.0.1", port=args.port, **options)
controller.start()
print(f"READY 127.0.0.1:{args.port}", flush=True)
stop = threading.Event()
for number in (signal.SIGTERM, signal.SIGINT):
    signal.signal(number, lambda *_: stop.set())
stop.wait()
controller.stop()
