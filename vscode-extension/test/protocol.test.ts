// Speaks to a real `kls serve` through the JSON-RPC stack VS Code's client is built on
// (vscode-jsonrpc + vscode-languageserver-protocol).
import { strict as assert } from "assert";
import { ChildProcess, spawn } from "child_process";
import * as fs from "fs";
import * as os from "os";
import * as path from "path";
import { pathToFileURL } from "url";
import {
  createProtocolConnection,
  Diagnostic,
  InitializeRequest,
  ProtocolConnection,
  PublishDiagnosticsNotification,
  PublishDiagnosticsParams,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-languageserver-protocol/node";

const REPO = path.resolve(__dirname, "..", "..", "..");
const PYTHON = process.env.KLS_PYTHON ?? path.join(REPO, ".venv", "bin", "python");

describe("kls serve over vscode-languageserver-protocol", function () {
  this.timeout(60_000);
  let server: ChildProcess;
  let connection: ProtocolConnection;
  let work: string;
  const published: PublishDiagnosticsParams[] = [];

  before(async () => {
    work = fs.mkdtempSync(path.join(os.tmpdir(), "kls-protocol-"));
    fs.cpSync(path.join(REPO, "templates"), work, { recursive: true });
    server = spawn(PYTHON, ["-m", "kls.cli", "serve"], { stdio: ["pipe", "pipe", "inherit"] });
    if (!server.stdout || !server.stdin) {
      throw new Error("kls serve has no stdio");
    }
    connection = createProtocolConnection(
      new StreamMessageReader(server.stdout),
      new StreamMessageWriter(server.stdin),
    );
    connection.onNotification(PublishDiagnosticsNotification.type, (params: PublishDiagnosticsParams) => {
      published.push(params);
    });
    connection.listen();
    await connection.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: pathToFileURL(work).toString(),
      capabilities: {},
      workspaceFolders: null,
    });
    await connection.sendNotification("initialized", {});
  });

  after(async () => {
    await connection.sendRequest("shutdown");
    await connection.sendNotification("exit");
    connection.dispose();
    server.kill();
  });

  async function diagnostics(uri: string, version: number): Promise<Diagnostic[]> {
    for (let i = 0; i < 400; i++) {
      const hit = published.find((p) => p.uri === uri && p.version === version);
      if (hit) {
        return hit.diagnostics;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error("no diagnostics");
  }

  it("reports a planted error at its exact range", async () => {
    const file = path.join(work, "softmax.cu.jinja");
    const text = fs.readFileSync(file, "utf8").replace('names_str="X, Y"', 'names_str="X, Y, Z"');
    const uri = pathToFileURL(file).toString();
    await connection.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "cuda-jinja", version: 1, text },
    });
    const found = (await diagnostics(uri, 1)).filter((d) => d.code === "KT201");
    assert.equal(found.length, 1);
    const at = text.indexOf('"X, Y, Z"');
    const line = text.slice(0, at).split("\n").length - 1;
    const col = at - (text.lastIndexOf("\n", at) + 1);
    assert.deepEqual(found[0].range, {
      start: { line, character: col },
      end: { line, character: col + '"X, Y, Z"'.length },
    });
    assert.equal(found[0].source, "kls");
  });

  it("answers the preview request with rendered CUDA", async () => {
    const file = path.join(work, "softmax.cu.jinja");
    const uri = pathToFileURL(file).toString();
    await connection.sendNotification("textDocument/didChange", {
      textDocument: { uri, version: 2 },
      contentChanges: [{ text: fs.readFileSync(file, "utf8") }],
    });
    const answer = await connection.sendRequest<{ instance: string; text: string }>("kls/preview", { uri });
    assert.equal(answer.instance, "softmax_bf16_8192x4096");
    assert.ok(answer.text.includes("PT_EXPORT int kls_softmax_bf16_8192x4096(const bfloat16* X, bfloat16* Y"));
  });
});
