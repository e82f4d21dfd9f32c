// The kls VS Code client: starts `kls serve` on the chosen interpreter and adds the UI around
// it (preview documents, instance picker, status bar, trust gating). All intelligence stays in
// the server.
import { execFile } from "child_process";
import * as path from "path";
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  State,
} from "vscode-languageclient/node";

import { PushDiagnosticsOnly } from "./logic/diagnostics";
import { pythonDocumentFilters, pythonFilesNamed, sameFiles } from "./logic/pythonFiles";
import { chooseInterpreter, importCheckArgs, installArgs } from "./logic/python";
import { PREVIEW_SCHEME, parsePreviewUri, previewAffectedBy, previewUriString } from "./logic/preview";
import { ServerState, jobSummary, statusText, statusTooltip } from "./logic/status";
import { TRUST_REQUIRED, effectiveSettings, serverCommand, untrustedMessage } from "./logic/server";

const LANGUAGE = "cuda-jinja";
// Server commands whose lenses need client UI rather than a plain server round trip.
const LENS_REWRITES: Record<string, string> = {
  "kls.preview": "kls.openPreview",
  "kls.selectInstance": "kls.pickInstance",
};

let client: LanguageClient | undefined;
let output: vscode.OutputChannel;
let statusItem: vscode.StatusBarItem;
let serverState: ServerState = "starting";
let activeInstance: string | undefined;
const jobs: string[] = [];
const previewChanged = new vscode.EventEmitter<vscode.Uri>();
const openPreviews = new Map<string, vscode.Uri>();
// Python files whose string constants kls.toml names as templates (file.py::CONSTANT).
let namedPythonFiles: string[] = [];

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("kls");
  statusItem = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  statusItem.command = "kls.statusClick";
  context.subscriptions.push(output, statusItem, previewChanged);
  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, {
      onDidChange: previewChanged.event,
      provideTextDocumentContent: providePreview,
    }),
    vscode.commands.registerCommand("kls.openPreview", openPreview),
    vscode.commands.registerCommand("kls.pickInstance", pickInstance),
    vscode.commands.registerCommand("kls.statusClick", statusClick),
    vscode.commands.registerCommand("kls.cancelJobs", () => cancelJobs()),
    vscode.commands.registerCommand("kls.compileActive", () => runJob("kls.compile", "check")),
    vscode.commands.registerCommand("kls.buildActive", () => runJob("kls.compile", "build")),
    vscode.commands.registerCommand("kls.benchmarkActive", () => runJob("kls.benchmark")),
    vscode.commands.registerCommand("kls.restartServer", () => restart(context)),
    vscode.commands.registerCommand("kls.installServer", () => installServer(context)),
    vscode.commands.registerCommand("kls.showOutput", () => output.show()),
    vscode.workspace.onDidChangeTextDocument((e) => schedulePreviewRefresh(e.document)),
    vscode.window.onDidChangeActiveTextEditor(() => void refreshInstance()),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void restart(context)),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("kls.python.interpreterPath") || e.affectsConfiguration("kls.files.pythonPatterns")) {
        void restart(context);
      }
    }),
    watchNamedPythonFiles(context),
  );
  await start(context);
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}

function setState(state: ServerState): void {
  serverState = state;
  renderStatus();
}

function renderStatus(): void {
  const input = { instance: activeInstance, state: serverState, jobs };
  statusItem.text = statusText(input);
  statusItem.tooltip = statusTooltip(input);
  statusItem.show();
}

async function pythonExtensionInterpreter(): Promise<string | undefined> {
  const extension = vscode.extensions.getExtension("ms-python.python");
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    const active = api?.environments?.getActiveEnvironmentPath?.();
    return typeof active?.path === "string" ? active.path : undefined;
  } catch (error) {
    output.appendLine(`Python extension did not report an interpreter: ${error}`);
    return undefined;
  }
}

function run(command: string, args: string[]): Promise<{ ok: boolean; out: string }> {
  return new Promise((resolve) => {
    execFile(command, args, { timeout: 600_000 }, (error, stdout, stderr) => {
      resolve({ ok: !error, out: `${stdout}${stderr}` });
    });
  });
}

async function interpreter(): Promise<string> {
  const setting = vscode.workspace.getConfiguration("kls").get<string>("python.interpreterPath");
  const choice = chooseInterpreter(setting, await pythonExtensionInterpreter());
  output.appendLine(`Python for kls: ${choice.path} (from ${choice.source})`);
  return choice.path;
}

async function start(context: vscode.ExtensionContext): Promise<void> {
  setState("starting");
  const python = await interpreter();
  const check = await run(python, importCheckArgs());
  if (!check.ok) {
    setState("missing");
    output.appendLine(`kls is not importable by ${python}:\n${check.out}`);
    const choice = await vscode.window.showWarningMessage(
      `kls is not installed in ${python}. Install it there, or set kls.python.interpreterPath.`,
      "Install kls",
      "Open Settings",
    );
    if (choice === "Install kls") {
      await installServer(context);
    } else if (choice === "Open Settings") {
      await vscode.commands.executeCommand("workbench.action.openSettings", "kls.python");
    }
    return;
  }
  output.appendLine(`kls ${check.out.trim()} found`);
  const command = serverCommand(python);
  const serverOptions: ServerOptions = { command: command.command, args: command.args };
  const patterns = vscode.workspace
    .getConfiguration("kls")
    .get<string[]>("files.patterns", ["**/*.cu.jinja", "**/*.cuh.jinja", "**/*.cu.j2", "**/*.cuh.j2"]);
  namedPythonFiles = await findNamedPythonFiles();
  const pythonPatterns = vscode.workspace.getConfiguration("kls").get<string[]>("files.pythonPatterns", []);
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { language: LANGUAGE },
      ...patterns.map((pattern) => ({ scheme: "file", pattern })),
      // Python files holding templates keep the python language (the Python extension's).
      ...pythonDocumentFilters(namedPythonFiles, pythonPatterns),
    ],
    outputChannel: output,
    traceOutputChannel: output,
    synchronize: {
      fileEvents: [
        vscode.workspace.createFileSystemWatcher("**/{kls.toml,pyproject.toml,*.jinja,*.j2}"),
        ...namedPythonFiles.map((file) =>
          vscode.workspace.createFileSystemWatcher(
            new vscode.RelativePattern(vscode.Uri.file(path.dirname(file)), path.basename(file)),
          ),
        ),
      ],
    },
    middleware: {
      workspace: {
        configuration: (params) =>
          params.items.map((item) =>
            item.section === "kls"
              ? effectiveSettings(
                  vscode.workspace.getConfiguration("kls") as unknown as Record<string, unknown>,
                  vscode.workspace.isTrusted,
                )
              : null,
          ),
      },
      executeCommand: async (command, args, next) => {
        if (TRUST_REQUIRED.has(command) && !vscode.workspace.isTrusted) {
          void vscode.window.showWarningMessage(untrustedMessage(command));
          return undefined;
        }
        return next(command, args);
      },
      provideCodeLenses: async (document, token, next) => {
        const lenses = (await next(document, token)) ?? [];
        for (const lens of lenses) {
          const rewrite = lens.command ? LENS_REWRITES[lens.command.command] : undefined;
          if (lens.command && rewrite) {
            // [uri, instance?]: a lens may name its instance (a Python file's templates do).
            const rest = (lens.command.arguments ?? []).slice(1);
            lens.command = { ...lens.command, command: rewrite, arguments: [document.uri, ...rest] };
          }
        }
        return lenses;
      },
    },
  };
  client = new LanguageClient("kls", "kls", serverOptions, clientOptions);
  // Pushed diagnostics only: pulling as well showed every finding twice (logic/diagnostics.ts).
  client.registerFeature(new PushDiagnosticsOnly());
  client.onDidChangeState((e) => {
    setState(e.newState === State.Running ? "running" : e.newState === State.Starting ? "starting" : "stopped");
  });
  context.subscriptions.push(client);
  try {
    await client.start();
    await refreshInstance();
  } catch (error) {
    setState("stopped");
    output.appendLine(`kls serve failed to start: ${error}`);
    void vscode.window.showErrorMessage("kls: the language server failed to start (see Output › kls).");
  }
}

/** The Python files that the workspace's kls.toml (or pyproject.toml) files name. */
async function findNamedPythonFiles(): Promise<string[]> {
  const found = new Set<string>();
  const configs = await vscode.workspace.findFiles("**/{kls.toml,pyproject.toml}", "**/node_modules/**", 100);
  for (const config of configs) {
    try {
      const text = Buffer.from(await vscode.workspace.fs.readFile(config)).toString("utf8");
      pythonFilesNamed(config.fsPath, text).forEach((file) => found.add(file));
    } catch (error) {
      output.appendLine(`kls: cannot read ${config.fsPath}: ${error}`);
    }
  }
  return [...found].sort();
}

/** When kls.toml names other Python files, restart the client with the new selector. */
function watchNamedPythonFiles(context: vscode.ExtensionContext): vscode.Disposable {
  const watcher = vscode.workspace.createFileSystemWatcher("**/{kls.toml,pyproject.toml}");
  const check = async (): Promise<void> => {
    if (client && !sameFiles(await findNamedPythonFiles(), namedPythonFiles)) {
      await restart(context);
    }
  };
  watcher.onDidChange(() => void check());
  watcher.onDidCreate(() => void check());
  watcher.onDidDelete(() => void check());
  return watcher;
}

async function restart(context: vscode.ExtensionContext): Promise<void> {
  if (client) {
    await client.stop();
    client = undefined;
  }
  await start(context);
}

async function installServer(context: vscode.ExtensionContext): Promise<void> {
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showWarningMessage("kls: installing packages is off in an untrusted workspace.");
    return;
  }
  const python = await interpreter();
  const source = vscode.workspace.getConfiguration("kls").get<string>("installSource", "kls");
  const result = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `Installing kls into ${python}` },
    () => run(python, installArgs(source)),
  );
  output.appendLine(result.out);
  if (!result.ok) {
    void vscode.window.showErrorMessage("kls: pip install failed (see Output › kls).");
    return;
  }
  await restart(context);
}

function templateUri(arg?: unknown): vscode.Uri | undefined {
  if (arg instanceof vscode.Uri) {
    return arg;
  }
  if (typeof arg === "string") {
    return vscode.Uri.parse(arg);
  }
  const editor = vscode.window.activeTextEditor;
  return editor && editor.document.languageId === LANGUAGE ? editor.document.uri : undefined;
}

async function openPreview(arg?: unknown, instance?: unknown): Promise<void> {
  const uri = templateUri(arg);
  if (!uri) {
    void vscode.window.showInformationMessage("kls: open a CUDA Jinja template first.");
    return;
  }
  const chosen = typeof instance === "string" ? instance : activeInstance;
  const previewUri = vscode.Uri.parse(previewUriString(uri.fsPath, chosen));
  openPreviews.set(previewUri.toString(), uri);
  const document = await vscode.workspace.openTextDocument(previewUri);
  await vscode.languages.setTextDocumentLanguage(document, "cuda-cpp").then(
    undefined,
    () => undefined,
  );
  await vscode.window.showTextDocument(document, { viewColumn: vscode.ViewColumn.Beside, preview: false });
}

async function providePreview(uri: vscode.Uri): Promise<string> {
  const target = parsePreviewUri(uri.scheme, uri.path, uri.query);
  if (!target || !client) {
    return "// kls: the language server is not running";
  }
  const answer = await client.sendRequest<{ text: string | null; error: string | null }>("kls/preview", {
    uri: vscode.Uri.file(target.templatePath).toString(),
    instance: target.instance,
  });
  return answer.text ?? `// kls: ${answer.error ?? "this instance does not render"}\n`;
}

let previewTimer: NodeJS.Timeout | undefined;
function schedulePreviewRefresh(document: vscode.TextDocument): void {
  if (document.uri.scheme !== "file" || openPreviews.size === 0) {
    return;
  }
  clearTimeout(previewTimer);
  previewTimer = setTimeout(() => {
    for (const [key, template] of openPreviews) {
      const target = { templatePath: template.fsPath };
      if (previewAffectedBy(target, document.uri.fsPath)) {
        previewChanged.fire(vscode.Uri.parse(key));
      }
    }
  }, 50);
}

interface InstanceAnswer {
  ok: boolean;
  active?: string | null;
  instances: string[];
  error?: string;
}

async function refreshInstance(): Promise<void> {
  const uri = templateUri();
  if (!client || !uri) {
    renderStatus();
    return;
  }
  const answer = await client.sendRequest<InstanceAnswer>("workspace/executeCommand", {
    command: "kls.selectInstance",
    arguments: [uri.toString()],
  });
  activeInstance = answer.active ?? undefined;
  renderStatus();
}

async function pickInstance(arg?: unknown): Promise<void> {
  const uri = templateUri(arg);
  if (!client || !uri) {
    return;
  }
  const answer = await client.sendRequest<InstanceAnswer>("workspace/executeCommand", {
    command: "kls.selectInstance",
    arguments: [uri.toString()],
  });
  if (answer.instances.length === 0) {
    void vscode.window.showInformationMessage("kls: no instance in kls.toml renders this template.");
    return;
  }
  const picked = await vscode.window.showQuickPick(answer.instances, {
    placeHolder: `Active instance (now ${answer.active ?? "none"})`,
  });
  if (!picked) {
    return;
  }
  await client.sendRequest("workspace/executeCommand", {
    command: "kls.selectInstance",
    arguments: [uri.toString(), picked],
  });
  activeInstance = picked;
  renderStatus();
  for (const key of openPreviews.keys()) {
    previewChanged.fire(vscode.Uri.parse(key));
  }
}

async function statusClick(): Promise<void> {
  if (jobs.length === 0) {
    await pickInstance();
    return;
  }
  const cancel = `Cancel ${jobs.join(", ")}`;
  const choice = await vscode.window.showQuickPick([cancel, "Select active instance"]);
  if (choice === cancel) {
    await cancelJobs();
  } else if (choice) {
    await pickInstance();
  }
}

async function cancelJobs(arg?: unknown): Promise<void> {
  const uri = templateUri(arg);
  if (!client || !uri) {
    return;
  }
  await client.sendRequest("workspace/executeCommand", {
    command: "kls.cancel",
    arguments: [uri.toString()],
  });
}

async function runJob(command: string, mode?: string): Promise<void> {
  const uri = templateUri();
  if (!client || !uri) {
    return;
  }
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showWarningMessage(untrustedMessage(command));
    return;
  }
  const title = mode ? `${mode} ${activeInstance ?? ""}` : `benchmark ${activeInstance ?? ""}`;
  jobs.push(title);
  renderStatus();
  try {
    const args = mode ? [uri.toString(), mode] : [uri.toString()];
    const running = client;
    // A notification with a Cancel button while it runs (the server's own progress shows in
    // the status bar, which has no button); Cancel stops the job (kls.cancel kills nvcc).
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `kls: ${title.trim()}`, cancellable: true },
      (_progress, token) => {
        const cancelled = token.onCancellationRequested(() => void cancelJobs(uri));
        return running
          .sendRequest<Record<string, unknown>>("workspace/executeCommand", { command, arguments: args })
          .finally(() => cancelled.dispose());
      },
    );
    void vscode.window.setStatusBarMessage(`kls ${title.trim()}: ${jobSummary(result)}`, 10_000);
  } finally {
    jobs.splice(jobs.indexOf(title), 1);
    renderStatus();
  }
}
