import { describe, expect, it } from 'vitest';
import { loudnessReportEnv, parseEbur128Summary } from '../../src/tools/ebur128.js';

/** ffmpeg 5.1's ebur128 summary (peak=true), as its report writes it. */
function summary(i: string, lra: string, peak: string): string {
  return [
    '[Parsed_ebur128_4 @ 0x5589b2c7c8c0] Summary:',
    '',
    '  Integrated loudness:',
    `    I:         ${i} LUFS`,
    '    Threshold: -33.0 LUFS',
    '',
    '  Loudness range:',
    `    LRA:         ${lra} LU`,
    '    Threshold: -43.0 LUFS',
    '    LRA low:   -23.1 LUFS',
    '    LRA high:  -22.9 LUFS',
    '',
    '  True peak:',
    `    Peak:      ${peak} dBFS`,
    '',
  ].join('\n');
}

describe('parseEbur128Summary', () => {
  it('reads integrated loudness, loudness range and true peak', () => {
    const log = `Input #0, mp3, from 'file:x':\nsize=     431kB time=00:00:05.00\n${summary('-23.0', '0.2', '-20.0')}`;
    expect(parseEbur128Summary(log)).toEqual({ integratedLufs: -23, rangeLu: 0.2, truePeakDbtp: -20 });
    expect(parseEbur128Summary(summary('-7.4', '11.5', '0.3'))).toEqual({
      integratedLufs: -7.4,
      rangeLu: 11.5,
      truePeakDbtp: 0.3,
    });
  });

  it('takes the last summary: a look-alike earlier in the log (an input metadata field, say) is not read', () => {
    const fake = summary('-1.0', '1.0', '1.0').replace(/\n/g, '\n    : ');
    expect(parseEbur128Summary(`  title : ${fake}\n${summary('-18.5', '3.1', '-1.2')}`)).toEqual({
      integratedLufs: -18.5,
      rangeLu: 3.1,
      truePeakDbtp: -1.2,
    });
  });

  it('gives null without a summary, for silence (-inf) and for a summary cut short', () => {
    expect(parseEbur128Summary('')).toBeNull();
    expect(parseEbur128Summary('[error] Conversion failed!')).toBeNull();
    expect(parseEbur128Summary(summary('-70.0', '0.0', '-inf'))).toBeNull();
    expect(parseEbur128Summary(summary('-23.0', '0.0', '-20.0').slice(0, 150))).toBeNull();
    // Control: the same summary whole is read.
    expect(parseEbur128Summary(summary('-23.0', '0.0', '-20.0'))).not.toBeNull();
  });
});

describe('loudnessReportEnv', () => {
  it("escapes FFREPORT's separators in the file name", () => {
    expect(loudnessReportEnv('ffmpeg-report.log')).toEqual({ FFREPORT: 'file=ffmpeg-report.log:level=32' });
    expect(loudnessReportEnv("a:b\\c'd")).toEqual({ FFREPORT: "file=a\\:b\\\\c\\'d:level=32" });
  });
});
