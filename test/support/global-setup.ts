import { probeServices } from './services';

export default async function globalSetup(): Promise<void> {
  await probeServices();
}
