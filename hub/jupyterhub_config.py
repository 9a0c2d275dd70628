"""JupyterHub for a class on one machine; started by `make hub` (`python -m autograder.hub serve`), which sets the
COURSE_HUB_* variables read here. autograder/hub.py says what each user's server is; docs/grading.md ("A class on
JupyterHub") says what a real deployment changes.
"""
import os
import sys
from pathlib import Path

from autograder.hub import STATE_ENV, USERS_ENV, HubPaths, Roster, _spawner_class, prepare_server

c = get_config()  # noqa: F821

paths = HubPaths(Path(os.environ[STATE_ENV]))
roster = Roster.load(Path(os.environ[USERS_ENV]))

# Only this machine can reach it (http, no TLS).
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(os.environ["COURSE_HUB_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(os.environ["COURSE_HUB_API_PORT"])
c.ConfigurableHTTPProxy.command = [os.environ["COURSE_HUB_PROXY"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{os.environ['COURSE_HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.pid_file = str(paths.hub / "proxy.pid")

# What the hub keeps across a restart: its users and their logins. Submissions live in the exchange, on disk.
c.JupyterHub.db_url = f"sqlite:///{paths.hub / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(paths.hub / "jupyterhub_cookie_secret")

# Users from hub/users.toml, with the one class password. Nobody is the hub's admin (the shared-password login would
# want a second password for that); an instructor's role is their server's, set in prepare_server.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = roster.password
c.Authenticator.allowed_users = set(roster.users)

# Each server runs as this machine's user, in a home of its own; prepare_server writes the home and the configuration
# (the learner's lab for a student, the formgrader for an instructor).
c.JupyterHub.spawner_class = _spawner_class()
c.SimpleLocalProcessSpawner.home_dir_template = str(paths.state / "home" / "{username}")
c.Spawner.cmd = [sys.executable, "-m", "jupyterhub.singleuser"]
c.Spawner.args = ["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []
c.Spawner.default_url = "/lab"
c.Spawner.pre_spawn_hook = prepare_server
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# Stopping the hub stops every server it started (SIGTERM, so that each shuts its kernels down first; on a busy machine
# that may take more than JupyterHub's 5 s before SIGKILL), and the proxy.
c.LocalProcessSpawner.term_timeout = 30
c.JupyterHub.cleanup_servers = True
c.JupyterHub.cleanup_proxy = True
