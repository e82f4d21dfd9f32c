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

import { ASSEMBLY_KINDS, ASSEMBLY_SCHEME, assemblyUriString, lineRuns, noInstructionsMessage } from "./logic/assembly";
import { PushDiagnosticsOnly } from "./logic/diagnostics";
import {
  ASSEMBLY_COMMAND,
  BENCHMARK_COMMAND,
  CANCEL_COMMAND,
  COMPILE_COMMAND,
  PREVIEW_REQUEST,
  SELECT_INSTANCE_COMMAND,
  TUNE_COMMAND,
  type AssemblyAnswer,
  type AssemblyKind,
  type BenchmarkAnswer,
  type CancelAnswer,
  type CompileAnswer,
  type CompileMode,
  type PreviewAnswer,
  type SelectInstanceAnswer,
  type TuneAnswer,
} from "./logic/protocol";
import { SingleFlight } from "./logic/singleFlight";
import { pythonDocumentFilters, pythonFilesNamed, sameFiles } from "./logic/pythonFiles";
import { chooseInterpreter, importCheckArgs, installArgs } from "./logic/python";
import { PREVIEW_SCHEME, parsePreviewUri, previewAffectedBy, previewUriString } from "./logic/preview";
import { ServerState, jobSummary, statusText, statusTooltip } from "./logic/status";
import { TRUST_REQUIRED, effectiveSettings, serverCommand, untrustedMessage } from "./logic/server";

// The template languages kls serves: CUDA Jinja, and Inductor's Triton `.py.jinja` templates.
const LANGUAGES = ["cuda-jinja", "python-jinja"];
// Server commands whose lenses need client UI rather than a plain server round trip.
const LENS_REWRITES: Record<string, string> = {
  "kls.preview": "kls.openPreview",
  "kls.selectInstance": "kls.pickInstance",
  // A tune takes minutes: run it as a job here (a notification with Cancel, the status bar).
  "kls.tune": "kls.tuneActive",
};

/** The part of the Python extension's API kls reads. */
interface PythonApi {
  environments?: {
    getActiveEnvironmentPath?: () => { path?: unknown } | undefined;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
}

let output: vscode.LogOutputChannel;
let status: StatusController;
let previews: PreviewController;
let controller: ClientController;
// Python files whose string constants kls.toml names as templates (file.py::CONSTANT).
let namedPythonFiles: string[] = [];
// The PTX / SASS documents shown (kls-asm: URI -> the server's last listing).
const assemblies = new Map<string, string>();
const assemblyChanged = new vscode.EventEmitter<vscode.Uri>();

/** The status bar item and what it shows: server state, active instance, running jobs. */
class StatusController implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 50);
  private state: ServerState = "starting";
  instance: string | undefined;
  readonly jobs: string[] = [];

  constructor() {
    this.item.command = "kls.statusClick";
  }

  setState(state: ServerState): void {
    this.state = state;
    this.render();
  }

  render(): void {
    const input = { instance: this.instance, state: this.state, jobs: this.jobs };
    this.item.text = statusText(input);
    this.item.tooltip = statusTooltip(input);
    this.item.show();
  }

  dispose(): void {
    this.item.dispose();
  }
}

/** Open preview documents and their refresh when a template they read changes. */
class PreviewController implements vscode.Disposable {
  readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly open = new Map<string, vscode.Uri>(); // preview URI -> template URI
  private timer: NodeJS.Timeout | undefined;

  scheduleRefresh(document: vscode.TextDocument): void {
    if (document.uri.scheme !== "file" || this.open.size === 0) {
      return;
    }
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      for (const [key, template] of this.open) {
        if (previewAffectedBy({ templatePath: template.fsPath }, document.uri.fsPath)) {
          this.changed.fire(vscode.Uri.parse(key));
        }
      }
    }, 50);
  }

  refreshAll(): void {
    for (const key of this.open.keys()) {
      this.changed.fire(vscode.Uri.parse(key));
    }
  }

  dispose(): void {
    clearTimeout(this.timer);
    this.changed.dispose();
  }
}

/**
 * The language client's life: one at a time. Restarts are single-flight (a trust grant and a
 * settings change together restart once more, not twice in parallel); a stop that fails
 * (the server already gone) is logged, and the old client is disposed before a new one starts.
 */
class ClientController implements vscode.Disposable {
  client: LanguageClient | undefined;
  private readonly flight: SingleFlight;

  constructor() {
    this.flight = new SingleFlight(() => this.replace());
  }

  restart(): Promise<void> {
    return this.flight.run();
  }

  private async replace(): Promise<void> {
    await this.stop();
    await start();
  }

  async stop(): Promise<void> {
    const old = this.client;
    this.client = undefined;
    if (!old) {
      return;
    }
    try {
      if (old.state !== State.Stopped) {
        await old.stop();
      }
    } catch (error) {
      output.warn(`kls: stopping the language server failed: ${error}`);
    }
    try {
      await old.dispose();
    } catch (error) {
      output.warn(`kls: disposing the language client failed: ${error}`);
    }
  }

  dispose(): void {
    void this.stop();
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("kls", { log: true });
  status = new StatusController();
  previews = new PreviewController();
  controller = new ClientController();
  context.subscriptions.push(output, status, previews, controller);
  const restart = (): Promise<void> => controller.restart();
  context.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, {
      onDidChange: previews.changed.event,
      provideTextDocumentContent: providePreview,
    }),
    vscode.workspace.registerTextDocumentContentProvider(ASSEMBLY_SCHEME, {
      onDidChange: assemblyChanged.event,
      provideTextDocumentContent: (uri) =>
        assemblies.get(uri.toString()) ?? "// kls: run `kls: Show PTX / SASS` again (the listing is gone)\n",
    }),
    assemblyChanged,
    vscode.commands.registerCommand("kls.openPreview", openPreview),
    vscode.commands.registerCommand("kls.showAssembly", showAssembly),
    vscode.commands.registerCommand("kls.pickInstance", pickInstance),
    vscode.commands.registerCommand("kls.statusClick", statusClick),
    vscode.commands.registerCommand("kls.cancelJobs", () => cancelJobs()),
    vscode.commands.registerCommand("kls.compileActive", () => runJob(COMPILE_COMMAND, "check")),
    vscode.commands.registerCommand("kls.buildActive", () => runJob(COMPILE_COMMAND, "build")),
    vscode.commands.registerCommand("kls.benchmarkActive", () => runJob(BENCHMARK_COMMAND)),
    vscode.commands.registerCommand("kls.tuneActive", (arg?: unknown) => runJob(TUNE_COMMAND, undefined, arg)),
    vscode.commands.registerCommand("kls.restartServer", restart),
    vscode.commands.registerCommand("kls.installServer", installServer),
    vscode.commands.registerCommand("kls.showOutput", () => output.show()),
    vscode.workspace.onDidChangeTextDocument((e) => previews.scheduleRefresh(e.document)),
    vscode.window.onDidChangeActiveTextEditor(() => void refreshInstance()),
    vscode.workspace.onDidGrantWorkspaceTrust(() => void restart()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("kls.python.interpreterPath") || e.affectsConfiguration("kls.files.pythonPatterns")) {
        void restart();
      }
    }),
    watchNamedPythonFiles(),
  );
  await watchInterpreter(context);
  await controller.restart();
}

export async function deactivate(): Promise<void> {
  await controller?.stop();
}

/** The Python extension's API, when it is installed (it reports the active interpreter). */
async function pythonExtensionApi(): Promise<PythonApi | undefined> {
  const extension = vscode.extensions.getExtension("ms-python.python");
  if (!extension) {
    return undefined;
  }
  try {
    return (extension.isActive ? extension.exports : await extension.activate()) as PythonApi;
  } catch (error) {
    output.warn(`Python extension did not load: ${error}`);
    return undefined;
  }
}

/** Restart kls when the Python extension's interpreter changes (and kls follows it). */
async function watchInterpreter(context: vscode.ExtensionContext): Promise<void> {
  const event = (await pythonExtensionApi())?.environments?.onDidChangeActiveEnvironmentPath;
  if (typeof event !== "function") {
    return;
  }
  context.subscriptions.push(
    event(() => {
      const setting = vscode.workspace.getConfiguration("kls").get<string>("python.interpreterPath");
      if (!setting) {
        output.info("kls: the Python interpreter changed; restarting the language server");
        void controller.restart();
      }
    }),
  );
}

async function pythonExtensionInterpreter(): Promise<string | undefined> {
  try {
    const active = (await pythonExtensionApi())?.environments?.getActiveEnvironmentPath?.();
    return typeof active?.path === "string" ? active.path : undefined;
  } catch (error) {
    output.warn(`Python extension did not report an interpreter: ${error}`);
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
  output.info(`Python for kls: ${choice.path} (from ${choice.source})`);
  return choice.path;
}

/** Start a client (ClientController.restart calls this, one at a time). */
async function start(): Promise<void> {
  status.setState("starting");
  const python = await interpreter();
  const check = await run(python, importCheckArgs());
  if (!check.ok) {
    status.setState("missing");
    output.error(`kls is not importable by ${python}:\n${check.out}`);
    // Not awaited: a restart must not wait for the user to answer.
    void vscode.window
      .showWarningMessage(
        `kls is not installed in ${python}. Install it there, or set kls.python.interpreterPath.`,
        "Install kls",
        "Open Settings",
      )
      .then((choice) => {
        if (choice === "Install kls") {
          void installServer(); // it restarts the client when pip is done
        } else if (choice === "Open Settings") {
          void vscode.commands.executeCommand("workbench.action.openSettings", "kls.python");
        }
      });
    return;
  }
  output.info(`kls ${check.out.trim()} found`);
  const command = serverCommand(python);
  const serverOptions: ServerOptions = { command: command.command, args: command.args };
  const patterns = vscode.workspace
    .getConfiguration("kls")
    .get<string[]>("files.patterns", [
      "**/*.cu.jinja",
      "**/*.cuh.jinja",
      "**/*.cu.j2",
      "**/*.cuh.j2",
      "**/*.py.jinja",
      "**/*.py.j2",
    ]);
  namedPythonFiles = await findNamedPythonFiles();
  const pythonPatterns = vscode.workspace.getConfiguration("kls").get<string[]>("files.pythonPatterns", []);
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      ...LANGUAGES.map((language) => ({ language })),
      ...patterns.map((pattern) => ({ scheme: "file", pattern })),
      // kls.toml: op-name completion inside an instance's `op = "..."`, its own diagnostics.
      { scheme: "file", pattern: "**/kls.toml" },
      // Python files holding templates keep the python language (the Python extension's).
      ...pythonDocumentFilters(namedPythonFiles, pythonPatterns),
    ],
    outputChannel: output,
    traceOutputChannel: output,
    // The settings up front: the server runs no tool (clang, nvcc) before it has them, and
    // this saves it waiting for its first workspace/configuration answer.
    initializationOptions: () => ({
      settings: effectiveSettings(
        vscode.workspace.getConfiguration("kls") as unknown as Record<string, unknown>,
        vscode.workspace.isTrusted,
      ),
    }),
    synchronize: {
      // kls.* changes reach the server (workspace/didChangeConfiguration: it pulls them again,
      // through the trust middleware below); without this a change needed a restart.
      configurationSection: "kls",
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
          rewriteLens(lens, document.uri);
        }
        return lenses;
      },
      // Benchmark and Tune lenses get their command here (their titles read results).
      resolveCodeLens: async (lens, token, next) => {
        const resolved = (await next(lens, token)) ?? lens;
        const first: unknown = resolved.command?.arguments?.[0];
        if (typeof first === "string") {
          rewriteLens(resolved, vscode.Uri.parse(first));
        }
        return resolved;
      },
    },
  };
  const client = new LanguageClient("kls", "kls", serverOptions, clientOptions);
  // Pushed diagnostics only: pulling as well showed every finding twice (logic/diagnostics.ts).
  client.registerFeature(new PushDiagnosticsOnly());
  client.onDidChangeState((e) => {
    if (controller.client === client) {
      status.setState(e.newState === State.Running ? "running" : e.newState === State.Starting ? "starting" : "stopped");
    }
  });
  controller.client = client;
  try {
    await client.start();
    await refreshInstance();
  } catch (error) {
    status.setState("stopped");
    output.error(`kls serve failed to start: ${error}`);
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
      output.warn(`kls: cannot read ${config.fsPath}: ${error}`);
    }
  }
  return [...found].sort();
}

/** When kls.toml names other Python files, restart the client with the new selector. */
function watchNamedPythonFiles(): vscode.Disposable {
  const watcher = vscode.workspace.createFileSystemWatcher("**/{kls.toml,pyproject.toml}");
  const check = async (): Promise<void> => {
    if (controller.client && !sameFiles(await findNamedPythonFiles(), namedPythonFiles)) {
      await controller.restart();
    }
  };
  watcher.onDidChange(() => void check());
  watcher.onDidCreate(() => void check());
  watcher.onDidDelete(() => void check());
  return watcher;
}

async function installServer(): Promise<void> {
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
  output.info(result.out);
  if (!result.ok) {
    void vscode.window.showErrorMessage("kls: pip install failed (see Output › kls).");
    return;
  }
  await controller.restart();
}

/** A server lens whose command needs client UI runs the client's command instead. */
function rewriteLens(lens: vscode.CodeLens, uri: vscode.Uri): void {
  const rewrite = lens.command ? LENS_REWRITES[lens.command.command] : undefined;
  if (lens.command && rewrite) {
    // [uri, instance?]: a lens may name its instance (a Python file's templates do).
    const rest = (lens.command.arguments ?? []).slice(1);
    lens.command = { ...lens.command, command: rewrite, arguments: [uri, ...rest] };
  }
}

function templateUri(arg?: unknown): vscode.Uri | undefined {
  if (arg instanceof vscode.Uri) {
    return arg;
  }
  if (typeof arg === "string") {
    return vscode.Uri.parse(arg);
  }
  const editor = vscode.window.activeTextEditor;
  return editor && LANGUAGES.includes(editor.document.languageId) ? editor.document.uri : undefined;
}

async function openPreview(arg?: unknown, instance?: unknown): Promise<void> {
  const uri = templateUri(arg);
  if (!uri) {
    void vscode.window.showInformationMessage("kls: open a kls template (.cu.jinja, .py.jinja) first.");
    return;
  }
  const chosen = typeof instance === "string" ? instance : status.instance;
  const previewUri = vscode.Uri.parse(previewUriString(uri.fsPath, chosen));
  previews.open.set(previewUri.toString(), uri);
  const document = await vscode.workspace.openTextDocument(previewUri);
  await vscode.languages.setTextDocumentLanguage(document, "cuda-cpp").then(
    undefined,
    () => undefined,
  );
  await vscode.window.showTextDocument(document, { viewColumn: vscode.ViewColumn.Beside, preview: false });
}

async function providePreview(uri: vscode.Uri): Promise<string> {
  const target = parsePreviewUri(uri.scheme, uri.path, uri.query);
  const client = controller.client;
  if (!target || !client) {
    return "// kls: the language server is not running";
  }
  const answer = await client.sendRequest<PreviewAnswer>(PREVIEW_REQUEST, {
    uri: vscode.Uri.file(target.templatePath).toString(),
    instance: target.instance,
  });
  return answer.text ?? `// kls: ${answer.error ?? "this instance does not render"}\n`;
}

async function refreshInstance(): Promise<void> {
  const uri = templateUri();
  const client = controller.client;
  if (!client || !uri) {
    status.render();
    return;
  }
  const answer = await client.sendRequest<SelectInstanceAnswer>("workspace/executeCommand", {
    command: SELECT_INSTANCE_COMMAND,
    arguments: [uri.toString()],
  });
  status.instance = answer.active ?? undefined;
  status.render();
}

async function pickInstance(arg?: unknown): Promise<void> {
  const uri = templateUri(arg);
  const client = controller.client;
  if (!client || !uri) {
    return;
  }
  const answer = await client.sendRequest<SelectInstanceAnswer>("workspace/executeCommand", {
    command: SELECT_INSTANCE_COMMAND,
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
    command: SELECT_INSTANCE_COMMAND,
    arguments: [uri.toString(), picked],
  });
  status.instance = picked;
  status.render();
  await retargetPreviews(uri, picked);
  previews.refreshAll();
}

/**
 * Open previews of `template` follow the picked instance: a preview names its instance in its
 * URI (and the server makes a previewed instance active), so each is replaced in its own
 * column by the picked instance's preview rather than re-rendered as the old one.
 */
async function retargetPreviews(template: vscode.Uri, instance: string): Promise<void> {
  const next = vscode.Uri.parse(previewUriString(template.fsPath, instance));
  for (const [key, target] of [...previews.open]) {
    const old = vscode.Uri.parse(key);
    if (target.toString() !== template.toString() || key === next.toString()) {
      continue;
    }
    previews.open.delete(key);
    previews.open.set(next.toString(), template);
    for (const group of vscode.window.tabGroups.all) {
      for (const tab of group.tabs) {
        if (tab.input instanceof vscode.TabInputText && tab.input.uri.toString() === old.toString()) {
          const document = await vscode.workspace.openTextDocument(next);
          await vscode.languages.setTextDocumentLanguage(document, "cuda-cpp").then(undefined, () => undefined);
          await vscode.window.showTextDocument(document, {
            viewColumn: group.viewColumn,
            preview: false,
            preserveFocus: true,
          });
          await vscode.window.tabGroups.close(tab, true);
        }
      }
    }
  }
}

async function statusClick(): Promise<void> {
  if (status.jobs.length === 0) {
    await pickInstance();
    return;
  }
  const cancel = `Cancel ${status.jobs.join(", ")}`;
  const choice = await vscode.window.showQuickPick([cancel, "Select active instance"]);
  if (choice === cancel) {
    await cancelJobs();
  } else if (choice) {
    await pickInstance();
  }
}

async function cancelJobs(arg?: unknown): Promise<void> {
  const uri = templateUri(arg);
  const client = controller.client;
  if (!client || !uri) {
    return;
  }
  await client.sendRequest<CancelAnswer>("workspace/executeCommand", {
    command: CANCEL_COMMAND,
    arguments: [uri.toString()],
  });
}

async function runJob(command: string, mode?: CompileMode, arg?: unknown): Promise<void> {
  const uri = templateUri(arg);
  const client = controller.client;
  if (!client || !uri) {
    return;
  }
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showWarningMessage(untrustedMessage(command));
    return;
  }
  const kind = mode ?? (command === TUNE_COMMAND ? "tune" : "benchmark");
  const title = `${kind} ${status.instance ?? ""}`;
  status.jobs.push(title);
  status.render();
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
          .sendRequest<CompileAnswer | BenchmarkAnswer | TuneAnswer>("workspace/executeCommand", {
            command,
            arguments: args,
          })
          .finally(() => cancelled.dispose());
      },
    );
    void vscode.window.setStatusBarMessage(`kls ${title.trim()}: ${jobSummary(result)}`, 10_000);
  } finally {
    status.jobs.splice(status.jobs.indexOf(title), 1);
    status.render();
  }
}

/** The PTX or SASS of the active Triton instance beside the editor, with the instructions of
 * the cursor's line selected: a template line, or a module line in the preview. */
async function showAssembly(kindArg?: unknown): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  const document = editor?.document;
  const fromPreview = document?.uri.scheme === PREVIEW_SCHEME;
  const fromTemplate = document !== undefined && LANGUAGES.includes(document.languageId);
  const client = controller.client;
  if (!editor || !document || !(fromPreview || fromTemplate) || !client) {
    void vscode.window.showInformationMessage("kls: open a Triton template (.py.jinja) or its preview first.");
    return;
  }
  if (!vscode.workspace.isTrusted) {
    void vscode.window.showWarningMessage(
      "kls: the PTX / SASS view is off in an untrusted workspace: it runs Inductor and Triton on this workspace's templates. Trust the workspace to enable it.",
    );
    return;
  }
  const kind = ASSEMBLY_KINDS.includes(kindArg as AssemblyKind)
    ? (kindArg as AssemblyKind)
    : ((await vscode.window.showQuickPick(ASSEMBLY_KINDS, { placeHolder: "Which listing?" })) as AssemblyKind | undefined);
  if (!kind) {
    return;
  }
  const target = fromPreview
    ? parsePreviewUri(document.uri.scheme, document.uri.path, document.uri.query)
    : { templatePath: document.uri.fsPath };
  if (!target) {
    return;
  }
  const line = editor.selection.active.line;
  const answer = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Window, title: `kls: Triton ${kind}` },
    () =>
      client.sendRequest<AssemblyAnswer>("workspace/executeCommand", {
        command: ASSEMBLY_COMMAND,
        arguments: [document.uri.toString(), kind, line],
      }),
  );
  if (!answer.ok || answer.text === undefined) {
    void vscode.window.showWarningMessage(`kls: ${answer.error ?? "no listing"}`);
    return;
  }
  const uri = vscode.Uri.parse(assemblyUriString(target.templatePath, kind, answer.instance));
  assemblies.set(uri.toString(), answer.text);
  assemblyChanged.fire(uri);
  const listing = await vscode.workspace.openTextDocument(uri);
  const shown = await vscode.window.showTextDocument(listing, { viewColumn: vscode.ViewColumn.Beside, preview: false });
  const runs = lineRuns(answer.lines ?? []).filter(([, last]) => last < listing.lineCount);
  if (runs.length === 0) {
    void vscode.window.setStatusBarMessage(noInstructionsMessage(kind, line), 10_000);
    return;
  }
  shown.selections = runs.map(
    ([first, last]) => new vscode.Selection(first, 0, last, listing.lineAt(last).text.length),
  );
  shown.revealRange(new vscode.Range(runs[0][0], 0, runs[0][1], 0), vscode.TextEditorRevealType.InCenter);
}
