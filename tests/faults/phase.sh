# Sourced by the fault-injection scripts (tests/faults_async.sh, tests/faults/matrix.sh): what a
# stopped process was doing, the first phase whose functions are on its main thread's stack
# ("?" without gdb). gdb's detach lets the process run again: stop it again if it must stay stopped.
phase_of() {  # PID
  command -v gdb > /dev/null || { echo "?"; return; }
  timeout 120 gdb -p "$1" -batch -ex "thread 1" -ex bt 2>/dev/null | grep -E '^#' | python3 -c '
import sys
stack = sys.stdin.read()
phases = [("checkpoint", ["save_checkpoint", "save_run"]),
          ("sync", ["WeightSync::sync", "receive_now", "WeightInbox::hold", "WeightInbox::take_one", "StepLoop::publish"]),
          ("decode", ["GenerationLoop::step", "Engine::generate"]),
          ("step", ["update_policy", "SupervisedRun"]),
          ("http", ["RemoteRollout", "httplib"]),
          ("grading", ["RolloutGenerator::generate"]),
          ("wait", ["collect", "recv_control", "RolloutChannel::deliver"])]
print(next((name for name, funcs in phases if any(f in stack for f in funcs)), "other"))'
}
