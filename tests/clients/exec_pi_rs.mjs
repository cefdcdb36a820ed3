// The reference's RpcClient starts `node <cliPath> --mode rpc ...`; given as its cliPath, this
// file runs the executable named by PI_RS_BIN (pi-rs, or a reference launcher) with the same
// arguments and stdio, passes termination signals on, and exits as it exits.
import { spawn } from "node:child_process";

const bin = process.env.PI_RS_BIN;
if (!bin) {
  console.error("exec_pi_rs: PI_RS_BIN is not set");
  process.exit(2);
}
const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (error) => {
  console.error(`exec_pi_rs: cannot start ${bin}: ${error.message}`);
  process.exit(127);
});
child.on("exit", (code, signal) => {
  process.exit(code ?? 128 + ({ SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 }[signal] ?? 0));
});
