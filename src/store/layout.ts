/**
 * Where content lives under the artifact root. One folder per content id, sharded by the id's
 * first two hex digits so that no folder grows past 256 entries per level:
 *   <root>/<cid[0..2]>/<cid>/<name>
 * The store writes here and delivery resolves here; nothing else spells the layout out.
 */
export const CONTENT_ID_PATTERN = /^[0-9a-f]{64}$/;

/** The WAV every fetch produces. */
export const AUDIO_ARTIFACT_NAME = 'audio.wav';
/** The WAV's waveform peaks (./peaks.ts), beside it under the same content id. */
export const PEAKS_ARTIFACT_NAME = 'peaks.json';

export function isContentId(value: string): boolean {
  return CONTENT_ID_PATTERN.test(value);
}

/** Folder of one content id, relative to the artifact root, with forward slashes. */
export function contentDirRelative(cid: string): string {
  return `${cid.slice(0, 2)}/${cid}`;
}

/** File of one artifact, relative to the artifact root, with forward slashes. */
export function artifactRelativePath(cid: string, name: string): string {
  return `${contentDirRelative(cid)}/${name}`;
}

/** The public path of an artifact, as served by getArtifact. */
export function artifactUrlPath(cid: string, name: string): string {
  return `/artifacts/${cid}/${encodeURIComponent(name)}`;
}
