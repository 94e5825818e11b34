import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Tests must never reach a hosted model: any OpenAI client call goes to a closed local port unless a
# test starts its own fake server and points at it explicitly.
os.environ["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
os.environ["OPENAI_API_KEY"] = "test-key-not-real"
os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
# Test helpers (fakes.py, ...) import by name; appended so they never shadow project packages.
sys.path.append(str(Path(__file__).resolve().parent))
