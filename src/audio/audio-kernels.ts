import { readFileSync } from 'node:fs';

/**
 * The WebAssembly kernels of the audio analysis (wasm/loudness-kernels.c: the loudness
 * meter's K-weighting and true peak, the waveform peaks' min/max), compiled once when this module
 * loads; each meter or accumulator takes an instance of its own (its state is the instance's).
 */
export interface AudioKernels {
  memory: { buffer: ArrayBuffer };
  input_buffer(): number;
  max_frames(): number;
  // The loudness meter's (src/audio/loudness.ts).
  configure(channels: number, phases: number, ...kWeighting: number[]): void;
  weigh(from: number, to: number): void;
  take_step_sum(): number;
  true_peak(frames: number): void;
  peak(): number;
  // The waveform peaks' (src/audio/peaks.ts).
  peaks_configure(channels: number, samplesPerPixel: number): number;
  peaks_output(): number;
  peaks(frames: number): number;
  peaks_flush(): number;
}

/** The WebAssembly constructors used here (the project's lib, ES2023 without the DOM's, does not declare them). */
const { Module, Instance } = (
  globalThis as unknown as {
    WebAssembly: { Module: new (bytes: Uint8Array) => object; Instance: new (module: object) => { exports: object } };
  }
).WebAssembly;

/** Read from src/ (from dist/ too: the build does not copy it), as the sandbox's scripts are. */
const KERNELS = new Module(readFileSync(new URL('../../src/audio/wasm/loudness-kernels.wasm', import.meta.url)));

/** A fresh instance of the kernels: its own memory and state. */
export function instantiateAudioKernels(): AudioKernels {
  return new Instance(KERNELS).exports as AudioKernels;
}
