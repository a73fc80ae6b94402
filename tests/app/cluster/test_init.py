"""Without the `cluster` extra: the commands say how to get it, and nothing else imports Ray."""

import subprocess
import sys

NO_RAY_CLI = (
    "import sys\n"
    "sys.modules['ray'] = None\n"       # `import ray` fails, as where the extra is not installed
    "from app.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _cli_without_ray(*args, cwd):
    return subprocess.run([sys.executable, "-c", NO_RAY_CLI, *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_say_cluster_without_ray_is_one_line_naming_the_extra(tmp_path):
    r = _cli_without_ray("say", "Hello.", "-o", "out.wav", "-m", "model.gguf", "--cluster",
                         "127.0.0.1:6379", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == ("chatterbox-studio: error: --cluster needs Ray: pip install "
                                                 "'chatterbox-studio[cluster]' (or: pip install 'ray[serve]')")
    assert not (tmp_path / "out.wav").exists()


def test_serve_cluster_without_ray_is_one_line_naming_the_extra(tmp_path):
    r = _cli_without_ray("serve", "-m", "model.gguf", "--cluster", "127.0.0.1:6379", cwd=tmp_path)
    assert r.returncode == 1
    assert "--cluster needs Ray: pip install 'chatterbox-studio[cluster]'" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_default_commands_never_import_ray():
    code = ("import sys\nfrom app.cli.main import build_parser\nbuild_parser()\n"
            "import app.cluster, app.cluster.pool, app.cluster.render, app.cluster.serve\n"
            "print('ray' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
