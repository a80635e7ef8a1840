// Validates Kubernetes manifests against the API's schemas, offline:
//   node validate.mjs [--quiet] PATH...   (files, or folders walked for *.yaml / *.yml)
//   node validate.mjs [--quiet] -         (YAML on stdin, e.g. `kubectl kustomize DIR`)
// Every document of every file must be a known apiVersion/kind and match its
// schema: the types, required fields and formats (kubernetes-models' JSON
// schema validators, from the Kubernetes OpenAPI spec) and no unknown field
// (the same models' TypeScript types: the OpenAPI schemas allow unknown
// fields, the API server drops them, so a misspelt `readinesProbe` would pass
// a schema check; TypeScript's excess-property check of an object literal
// finds it). kustomization.yaml files are not resources and are skipped, and
// so are kustomize Components' patches (inline, not files). Errors name the
// file, the document and the field's path; the exit code is 1 when any.
// Custom resources (cert-manager's Certificate, Issuer) from the @kubernetes-models
// packages in package.json. Used by scripts/container-test.sh; `k8s-validate.sh --selftest` proves
// it rejects what it should.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import YAML from "yaml";
import ts from "typescript";

const require = createRequire(import.meta.url);
const args = process.argv.slice(2);
const quiet = args[0] === "--quiet" ? (args.shift(), true) : false;
if (args.length === 0) {
  console.error("usage: validate.mjs [--quiet] PATH... | -");
  process.exit(2);
}

// ------------------------------------------------------------------ inputs
function yamlFiles(p) {
  const st = fs.statSync(p);
  if (!st.isDirectory()) return [p];
  return fs
    .readdirSync(p)
    .sort()
    .flatMap((e) => {
      const q = path.join(p, e);
      if (fs.statSync(q).isDirectory()) return yamlFiles(q);
      return /\.ya?ml$/.test(e) && e !== "kustomization.yaml" && e !== "kustomization.yml" ? [q] : [];
    });
}
const inputs = []; // {name, text}
for (const a of args) {
  if (a === "-") inputs.push({ name: "<stdin>", text: fs.readFileSync(0, "utf8") });
  else for (const f of yamlFiles(a)) inputs.push({ name: f, text: fs.readFileSync(f, "utf8") });
}

// Where models come from: Kubernetes' own API, then the custom resources'
// packages this validator depends on (package.json), e.g. cert-manager's.
const modelPackages = [
  "kubernetes-models",
  ...Object.keys(require("./package.json").dependencies).filter((d) =>
    d.startsWith("@kubernetes-models/"),
  ),
];

const errors = [];
const docs = []; // {where, obj, Model, typeImport, typeName}
for (const { name, text } of inputs) {
  YAML.parseAllDocuments(text).forEach((d, i) => {
    const where = `${name}: document ${i + 1}`;
    if (d.errors.length) {
      errors.push(`${where}: YAML: ${d.errors[0].message}`);
      return;
    }
    const obj = d.toJS();
    if (obj === null || obj === undefined) return; // an empty document
    if (typeof obj !== "object" || Array.isArray(obj)) {
      errors.push(`${where}: not a mapping`);
      return;
    }
    const { apiVersion, kind } = obj;
    if (typeof apiVersion !== "string" || typeof kind !== "string") {
      errors.push(`${where}: no apiVersion and kind`);
      return;
    }
    // "v1" is the core group; "apps/v1" -> kubernetes-models/apps/v1/KIND.
    // Custom resources come from the @kubernetes-models/* packages in
    // package.json, e.g. cert-manager.io/v1 Certificate ->
    // @kubernetes-models/cert-manager/cert-manager.io/v1/Certificate.
    let mod, modulePath;
    for (const pkg of modelPackages) {
      try {
        mod = require(`${pkg}/${apiVersion}/${kind}`);
        modulePath = `${pkg}/${apiVersion}/${kind}`;
        break;
      } catch {}
    }
    if (!mod) {
      errors.push(`${where}: unknown apiVersion/kind ${apiVersion} ${kind}`);
      return;
    }
    const Model = mod[kind];
    if (typeof Model !== "function") {
      errors.push(`${where}: unknown kind ${kind} in ${apiVersion}`);
      return;
    }
    docs.push({ where: `${where} (${kind} ${obj.metadata?.name ?? "?"})`, obj, Model, modulePath, kind });
  });
}

// --------------------------------------- types, required fields, formats
for (const d of docs) {
  try {
    new d.Model(d.obj).validate();
  } catch (e) {
    for (const err of e.errors ?? [{ instancePath: "", message: e.message }]) {
      errors.push(`${d.where}: ${err.instancePath || "/"} ${err.message}` +
        (err.params?.additionalProperty ? ` (${err.params.additionalProperty})` : ""));
    }
  }
}

// ------------------------------------------------------- unknown fields
// One virtual TypeScript file per document: `const x: IKind = {...}`, the
// object written one key per line, with each line's field path remembered.
function literal(value, pathNow, lines, indent) {
  const pad = "  ".repeat(indent);
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    const parts = value.map((v, i) => {
      const p = `${pathNow}/${i}`;
      lines.push(p);
      return `${pad}  ${literal(v, p, lines, indent + 1)}`;
    });
    lines.push(pathNow);
    return `[\n${parts.join(",\n")}\n${pad}]`;
  }
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value);
    if (keys.length === 0) return "{}";
    const parts = keys.map((k) => {
      const p = `${pathNow}/${k}`;
      lines.push(p);
      return `${pad}  ${JSON.stringify(k)}: ${literal(value[k], p, lines, indent + 1)}`;
    });
    lines.push(pathNow);
    return `{\n${parts.join(",\n")}\n${pad}}`;
  }
  if (value instanceof Date) return JSON.stringify(value.toISOString());
  return JSON.stringify(value);
}
// The virtual files live beside this script, so that their imports resolve
// to the node_modules here.
const here = path.dirname(new URL(import.meta.url).pathname);
const files = new Map(); // virtual file's absolute name -> {text, lines, doc}
docs.forEach((d, i) => {
  const lines = ["", ""]; // the import line, then the declaration's own
  const body = literal(d.obj, "", lines, 0);
  const text =
    `import type { I${d.kind} as T } from ${JSON.stringify(d.modulePath)};\n` +
    `export const doc: T = ${body};\n`;
  files.set(path.join(here, `__doc${i}.ts`), { text, lines, doc: d });
});
if (files.size > 0) {
  const options = {
    noEmit: true,
    strict: true,
    skipLibCheck: true,
    types: [],
    target: ts.ScriptTarget.ES2020,
    module: ts.ModuleKind.Node16,
    moduleResolution: ts.ModuleResolutionKind.Node16,
  };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, lang, ...rest) =>
    files.has(name)
      ? ts.createSourceFile(name, files.get(name).text, lang)
      : getSourceFile(name, lang, ...rest);
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => files.has(name) || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => files.get(name)?.text ?? readFile(name);
  host.getCurrentDirectory = () => here;
  const program = ts.createProgram([...files.keys()], options, host);
  for (const diag of ts.getPreEmitDiagnostics(program)) {
    const f = diag.file && files.get(diag.file.fileName);
    const message = ts.flattenDiagnosticMessageText(diag.messageText, " ").replace(/\s+/g, " ");
    if (!f) {
      errors.push(`validator: ${message}`);
      continue;
    }
    const { line } = diag.file.getLineAndCharacterOfPosition(diag.start ?? 0);
    // Keep the last sentence of TypeScript's chain: the one about the field.
    const last = message.split(/(?<=\.) (?=Type |Object literal |Property )/).pop();
    errors.push(`${f.doc.where}: ${f.lines[line] || "/"}: ${last}`);
  }
}

// --------------------------------------------------------------- report
const unique = [...new Set(errors)];
for (const e of unique) console.error(e);
if (unique.length > 0) {
  console.error(`k8s-validate: ${unique.length} error(s) in ${inputs.length} file(s)`);
  process.exit(1);
}
if (!quiet) {
  for (const d of docs) console.log(`valid: ${d.where}`);
}
console.log(`k8s-validate: ${docs.length} document(s) in ${inputs.length} file(s) valid`);
