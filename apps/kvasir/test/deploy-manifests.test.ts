import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadAll } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { CLI } from './harness.js';

// The Kubernetes manifests of the deployment guide cannot run here (no cluster, no gateway, no
// EPP). What can be checked is: they parse, they agree with each other (labels, ports, block
// size, the topic's variable), and every `kvasir serve` flag they use exists in the built CLI.

const dir = join(dirname(fileURLToPath(import.meta.url)), '..', 'deploy', 'kubernetes');
type Doc = {
  apiVersion: string;
  kind: string;
  metadata: { name: string };
  // biome-ignore lint/suspicious/noExplicitAny: manifests are free-form YAML
  spec?: any;
  data?: Record<string, string>;
};
const files = readdirSync(dir).filter((f) => f.endsWith('.yaml'));
const docs: { file: string; doc: Doc }[] = files.flatMap((file) =>
  (loadAll(readFileSync(join(dir, file), 'utf8')) as Doc[]).map((doc) => ({ file, doc })),
);
const byKind = (kind: string) => docs.filter((d) => d.doc.kind === kind).map((d) => d.doc);
const servingArgs = byKind('Deployment').map(
  (d) => d.spec.template.spec.containers[0].args as string[],
);

describe('deploy/kubernetes manifests', () => {
  it('parse as Kubernetes objects', () => {
    expect(files.length).toBeGreaterThanOrEqual(3);
    for (const { file, doc } of docs) {
      expect(typeof doc.apiVersion, file).toBe('string');
      expect(typeof doc.kind, file).toBe('string');
      expect(doc.metadata.name, file).toMatch(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/);
    }
  });

  it('the InferencePool selects the replicas on their HTTP port, and the route targets the pool', () => {
    const [pool] = byKind('InferencePool');
    expect(pool!.apiVersion).toBe('inference.networking.k8s.io/v1');
    for (const d of byKind('Deployment')) {
      const labels = d.spec.template.metadata.labels;
      for (const [k, v] of Object.entries(pool!.spec.selector.matchLabels))
        expect(labels[k]).toBe(v);
      const ports = d.spec.template.spec.containers[0].ports.map(
        (p: { containerPort: number }) => p.containerPort,
      );
      expect(ports).toContain(pool!.spec.targetPorts[0].number);
      const args = d.spec.template.spec.containers[0].args as string[];
      expect(String(pool!.spec.targetPorts[0].number)).toBe(args[args.indexOf('--port') + 1]);
    }
    const [route] = byKind('HTTPRoute');
    expect(route!.spec.rules[0].backendRefs[0]).toMatchObject({
      kind: 'InferencePool',
      name: pool!.metadata.name,
    });
  });

  it('every kvasir serve flag they use exists, and the llm-d scorer agrees with the replicas', () => {
    const help = execFileSync(process.execPath, [CLI, 'serve', '--help']).toString();
    for (const args of servingArgs) {
      expect(args[0]).toBe('serve');
      for (const flag of args.filter((a) => a.startsWith('--')))
        expect(help, flag).toContain(`${flag} `);
    }
    // biome-ignore lint/suspicious/noExplicitAny: the EPP config is free-form YAML
    const config = loadAll(byKind('ConfigMap')[0]!.data!['epp-config.yaml']!)[0] as any;
    const scorer = config.plugins.find(
      (p: { type: string }) => p.type === 'precise-prefix-cache-scorer',
    );
    const llmd = byKind('Deployment').find((d) => d.metadata.name === 'kvasir-llm-d')!;
    const args = llmd.spec.template.spec.containers[0].args as string[];
    expect(String(scorer.parameters.indexerConfig.tokenProcessorConfig.blockSize)).toBe(
      args[args.indexOf('--block-size') + 1],
    );
    // Kvasir connects (no `*`) to the EPP's bound SUB socket, on its port, under a kv@ topic.
    const endpoint = args[args.indexOf('--kv-events') + 1]!;
    expect(endpoint).not.toContain('*');
    expect(endpoint.split(':').at(-1)).toBe(
      String(scorer.parameters.kvEventsConfig.zmqEndpoint).split(':').at(-1),
    );
    expect(args[args.indexOf('--kv-events-topic') + 1]).toMatch(
      new RegExp(`^${scorer.parameters.kvEventsConfig.topicFilter}`),
    );
    expect(
      llmd.spec.template.spec.containers[0].env.map((e: { name: string }) => e.name),
    ).toContain('POD_IP');
  });
});
