/** What the packaged model is, for banners and model cards; filled in by the packaging script. */
export interface MiniModelInfo {
  /** The name the model is served under. */
  readonly name: string;
  /** Trainable parameters (embeddings and LM head included). */
  readonly parameters: number;
  readonly architecture: {
    readonly hiddenSize: number;
    readonly numLayers: number;
    readonly numHeads: number;
    readonly numKvHeads: number;
    readonly intermediateSize: number;
    readonly vocabSize: number;
    readonly contextLength: number;
  };
  /** The training run the weights come from. */
  readonly run: string;
  /** The step the exported checkpoint was taken at, and the run's planned total. */
  readonly step: number;
  readonly totalSteps: number;
  readonly tokensSeen: number;
  /** Wall-clock seconds of training up to `step` (2-core CPU, shared with other work). */
  readonly trainingSeconds: number;
  /** The last held-out evaluation before `step` (PyTorch, 512-token windows). */
  readonly heldout: {
    readonly step: number;
    readonly loss: number;
    readonly perplexity: number;
    readonly windows: number;
  } | null;
  /** Corpus sources, in the order the model card lists them. */
  readonly corpus: readonly string[];
  /** Whether the weights may be used commercially (no: the Brown Corpus is in the mix). */
  readonly commercialUse: false;
}
