// Preview documents: the rendered CUDA of a template's instance, addressed by URI.
// Mirrors kls.lsp.preview on the server: kls-preview:<template path>.cu?instance=<name>

export const PREVIEW_SCHEME = "kls-preview";

export interface PreviewTarget {
  templatePath: string;
  instance?: string;
}

/** What the rendered text is, for highlighting: a Triton module (`.py.jinja`) or CUDA. */
export function renderedSuffix(templatePath: string): string {
  return /\.py\.(jinja|j2)$/.test(templatePath) ? ".py" : ".cu";
}

export function previewUriString(templatePath: string, instance?: string): string {
  const query = instance ? `?instance=${encodeURIComponent(instance)}` : "";
  return `${PREVIEW_SCHEME}:${encodeURI(templatePath)}${renderedSuffix(templatePath)}${query}`;
}

export function parsePreviewUri(scheme: string, path: string, query: string): PreviewTarget | undefined {
  if (scheme !== PREVIEW_SCHEME || !(path.endsWith(".cu") || path.endsWith(".py"))) {
    return undefined;
  }
  const templatePath = path.slice(0, -3);
  if (renderedSuffix(templatePath) !== path.slice(-3)) {
    return undefined;
  }
  const params = new URLSearchParams(query);
  const instance = params.get("instance") ?? undefined;
  return { templatePath, instance };
}

/** Whether a change to `changedPath` should refresh the preview of `target`. */
export function previewAffectedBy(target: PreviewTarget, changedPath: string): boolean {
  return (
    target.templatePath === changedPath ||
    changedPath.endsWith(".cuh.jinja") ||
    changedPath.endsWith(".cuh.j2") ||
    changedPath.endsWith("kls.toml")
  );
}
