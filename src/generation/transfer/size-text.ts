/** File sizes for sentences (`2 GiB`, `1.5 MiB`, `300 bytes`), shared by uploads and downloads. */

export const MIB = 1024 * 1024;
const GIB = 1024 * MIB;

export function sizeText(bytes: number): string {
  if (bytes >= GIB) return `${Number((bytes / GIB).toFixed(1))} GiB`;
  if (bytes >= MIB) return `${Number((bytes / MIB).toFixed(1))} MiB`;
  return `${bytes} bytes`;
}
