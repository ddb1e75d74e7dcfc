"""The runtime tests' JavaScript runtime: one per module (runtime_testkit.js_runtime says how to ask for another)."""

from tests.unit.runtime.runtime_testkit import js_runtime

rt = js_runtime()
